//! The image stage of stackbuild: layers and their compressions, OCI layouts, registries, loading.
//!
//! It must not depend on `stackbuild-python` or `stackbuild-recipe`: a layer is files and settings,
//! not packages.
//!
//! - `layer`: deterministic layer tars and their compression.
//! - `oci`: OCI image layouts and `docker load` archives.
//! - `load`: `--load`, streaming an image archive into the local Docker daemon.
//! - `registry`: an OCI distribution client: push a layout to a registry, pull an image from one.
//! - `output`: the paths a build writes (`--out`, `--archive`, `--report`): only where it may.
//! - `base`: the image's base: scratch, an OCI layout, or a Debian rootfs by mmdebstrap.
//! - `glibc`: the glibc an image's layers carry, read from `libc.so.6` without running it.
//! - `sbom`: the image's SBOM (SPDX 2.3 and `CycloneDX` 1.6 JSON), a pure function of the build's
//!   inputs.

mod base;
mod glibc;
mod layer;
mod load;
mod oci;
mod output;
mod registry;
mod sbom;

pub use base::{
    archive_identity, cached_import, check_layout_layers, extract_image_archive, host_apt_sources,
    import_archive, BaseError, DebianBase,
};
pub use glibc::glibc_of_layers;
pub use layer::{
    estargz, source_date_epoch, Codec, Encoding, LayerError, LayerWriter, MemberCodec, TocLayout,
};
pub use load::{export_image, image_id, LoadError, Loader, SpooledTar, TarSpool};
pub use oci::{
    read_layout, read_layout_for, verify_layout_blob, write_archive, write_layout, Descriptor,
    DockerSaveEntry, History, Image, ImageConfig, Index, Manifest, OciError, Platform, RootFs, RuntimeConfig,
    ANNOTATION_CONTAINERD_NAME, ANNOTATION_REF_NAME, MEDIA_TYPE_MANIFEST,
};
pub use output::{
    check_distinct, check_layout_dir, check_output_file, write_file, write_layout as write_out_layout,
    OutputError,
};
pub use registry::{
    pull, pull_with, push_layout, push_layout_with, push_referrer, Client, Credentials, PullOptions,
    PushOptions, PushReport, Reference, ReferrerReport, RegistryError, RemoteCache, Subject,
};
pub use sbom::{
    Sbom, SbomInput, SbomLayer, CYCLONEDX_MEDIA_TYPE, CYCLONEDX_PATH, SPDX_MEDIA_TYPE, SPDX_PATH,
};
