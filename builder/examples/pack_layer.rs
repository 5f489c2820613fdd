//! Benchmark helper for `bench/run.sh`: times the builder's layer writer on a directory tree.
//! (The fixture GPU host of the hook benchmark is the hook's example `fixture_host`.)
//!
//! ```sh
//! cargo build --release -p stackbuild --example pack_layer
//! target/release/examples/pack_layer pack TREE --cache DIR [--compression gzip|zstd|estargz|zstd:chunked|none]
//! ```
//!
//! `pack` does what a build does for one layer, through the public API: [`LayerWriter::add_dir`]
//! (walk the tree, sorted, owned by root), then [`LayerWriter::finish`] (deterministic tar, `diff_id`,
//! parallel multi-member gzip or zstd, blob digest, rename into the cache). It prints one JSON
//! object on stdout: `{"compression","entries","blob_bytes","seconds","digest","diff_id"}`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackbuild_image::LayerWriter;

#[derive(Debug, Parser)]
#[command(about = "Benchmark helper: times the layer writer on a tree")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pack TREE into one layer blob in the cache at --cache and print the timing as JSON.
    Pack {
        /// The directory tree to pack (its contents become the layer root).
        tree: PathBuf,
        /// Cache directory the blob is written into (created if missing).
        #[arg(long)]
        cache: PathBuf,
        /// gzip, zstd, estargz, zstd:chunked or none.
        #[arg(long, default_value = "gzip")]
        compression: Compression,
    },
}

fn pack(tree: &Path, cache: PathBuf, compression: Compression) -> anyhow::Result<()> {
    let cache_dir = cache.clone();
    let cache = Cache::open(cache).with_context(|| format!("opening cache {}", cache_dir.display()))?;
    let epoch = stackbuild_image::source_date_epoch()?;
    let start = Instant::now();
    let mut writer = LayerWriter::new(&cache, epoch);
    writer.add_dir(tree, "").with_context(|| format!("walking {}", tree.display()))?;
    let entries = writer.len();
    let blob = writer.finish(compression).with_context(|| format!("packing {}", tree.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "compression": compression.name(),
        "entries": entries,
        "blob_bytes": blob.size,
        "seconds": seconds,
        "digest": blob.digest,
        "diff_id": blob.diff_id,
    });
    println!("{out}");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Pack { tree, cache, compression } => pack(&tree, cache, compression),
    }
}
