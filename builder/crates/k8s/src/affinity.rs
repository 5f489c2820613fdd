//! Kubernetes node affinity from an image's contract: the scheduler places a pod only on nodes
//! whose `stackhook` would let the container start.
//!
//! The image's requirements are gathered exactly as the hook gathers them
//! ([`ContainerRequest::from_env`]: `NVIDIA_REQUIRE_*`, `STACKBUILD_REQUIRE_*`, the
//! `CUDA_VERSION` fallback, `io.stackbuild.require.*` annotations) and translated into
//! `nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms` over the
//! labels `stackhook labels` publishes ([`stackcontract::labels`]).
//!
//! Semantics. The terms of one variable are OR-ed and `nodeSelectorTerms` are OR-ed too; separate
//! variables are AND-ed, so the variables' terms are multiplied out (AND distributed over OR)
//! into terms whose `matchExpressions` are AND-ed (Kubernetes API, `NodeSelector`). The result is
//! simplified (contradictions dropped, duplicates and implied terms removed, terms that differ
//! in one `In` merged) and refused above [`MAX_TERMS`].
//!
//! Soundness is the rule: a node the selector matches is a node whose hook accepts the
//! requirements. Where a label cannot say exactly what the hook checks, the selector says less
//! (it may leave out a node the hook would accept), never more:
//!
//! - Versions become integer codes compared with `Gt`/`Lt` (`cuda>=12.1` -> `cuda.max.code Gt
//!   12000999`; [`stackcontract::labels::version_code`]).
//! - `arch` and `brand` hold for each GPU the container gets; the labels give bounds over all the
//!   node's GPUs (`gpu.compute.min`/`max`) and a brand only when all GPUs share it, so a term
//!   matches when all GPUs satisfy it.
//! - A term without a `cuda` factor in an expression with one (NVIDIA's `brand=...,driver>=...`
//!   terms) passes on a driver that supports an older CUDA major only with the cuda-compat
//!   package, which the hook refuses on GPUs that cannot run it: such terms also need
//!   `cuda.max` of the needed major, or a node whose GPUs run forward compatibility.
//! - `gpus` counts the GPUs the container gets, which only the pod's `nvidia.com/gpu` request
//!   decides: the selector requires a node with enough GPUs and a note says so.
//! - Every term requires `stackbuild.io/labels.schema`, so `NotIn` (which also matches a node
//!   without the label) only ever sees nodes that `stackhook labels` labelled, and, unless
//!   [`Options::require_ready`] is off, `stackbuild.io/host.ready=true` (the hook refuses every
//!   GPU container on a node whose doctor finds an error).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use stackcontract::image::{ContainerRequest, ContractError, REQUIRE_ANNOTATION_PREFIX};
use stackcontract::labels as l;
use stackcontract::require::{Expr, Factor, Key, NodeLabels, Op, RequirementSet, Term, Value};

use stackbuild_common::ImageArg;
use stackbuild_image::{ImageConfig, OciError};

/// Most node selector terms a translation may produce.
pub(crate) const MAX_TERMS: usize = 64;
/// Largest JSON member of an archive that is read (index, manifests, config).
const ARCHIVE_JSON_CAP: u64 = 16 * 1024 * 1024;
/// Most bytes of JSON members read from one archive in all.
const ARCHIVE_TOTAL_CAP: u64 = 64 * 1024 * 1024;

/// Why no affinity could be produced.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// The image path (or `PATH:TAG`) names nothing.
    #[error("{image}: no such OCI layout or archive")]
    NotFound {
        /// The image argument.
        image: String,
    },
    /// The OCI layout could not be read.
    #[error("{image}: {source}")]
    Oci {
        /// The image argument.
        image: String,
        /// Why.
        #[source]
        source: OciError,
    },
    /// The archive could not be read.
    #[error("reading archive {path}: {source}")]
    Archive {
        /// The archive.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The archive holds no image this reader can find.
    #[error("archive {path}: {what}")]
    ArchiveFormat {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A requirement variable or annotation does not parse.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// A factor that no node label can express.
    #[error("{source_name}: `{factor}` cannot be expressed as node affinity: {why}")]
    Unexpressible {
        /// The variable or annotation.
        source_name: String,
        /// The factor as written.
        factor: String,
        /// Why.
        why: String,
    },
    /// A requirement no node can satisfy.
    #[error("{source_name}: `{expr}` can never hold, so no node can run the image")]
    Unsatisfiable {
        /// The variable or annotation.
        source_name: String,
        /// The expression.
        expr: String,
    },
    /// Requirement variables that no node can satisfy together.
    #[error("{sources} contradict each other: no node can satisfy them all")]
    Contradiction {
        /// The variables multiplied so far.
        sources: String,
    },
    /// The product of the variables' terms is too large.
    #[error(
        "the requirements expand to {terms} node selector terms, more than {max} (variables: {sources}); \
         simplify them or split the image's requirement variables"
    )]
    TooManyTerms {
        /// How many terms (at least).
        terms: usize,
        /// The limit.
        max: usize,
        /// The variables multiplied so far.
        sources: String,
    },
}

/// A `NodeSelectorRequirement` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Operator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's value, as an integer, is greater than `values[0]`.
    Gt,
    /// The label's value, as an integer, is less than `values[0]`.
    Lt,
}

impl Operator {
    /// The operator as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }
}

/// One `NodeSelectorRequirement`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MatchExpression {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values (none for `Exists` and `DoesNotExist`, one for `Gt` and `Lt`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl MatchExpression {
    fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        Self { key: key.to_owned(), operator, values: values.iter().map(|v| (*v).to_owned()).collect() }
    }

    fn int(key: &str, operator: Operator, value: i64) -> Self {
        Self { key: key.to_owned(), operator, values: vec![value.to_string()] }
    }

    /// Whether a node with `labels` matches, as the scheduler decides it.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let int = |v: &str| v.parse::<i64>().ok();
        let bound = self.values.first().and_then(|v| int(v));
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt => matches!((value.and_then(|v| int(v)), bound), (Some(v), Some(b)) if v > b),
            Operator::Lt => matches!((value.and_then(|v| int(v)), bound), (Some(v), Some(b)) if v < b),
        }
    }
}

/// One `NodeSelectorTerm`: its expressions are AND-ed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    /// The expressions.
    pub match_expressions: Vec<MatchExpression>,
}

impl NodeSelectorTerm {
    /// Whether a node with `labels` matches every expression.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_expressions.iter().all(|e| e.matches(labels))
    }
}

/// What to require besides the image's requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Require `stackbuild.io/host.ready=true` (on by default).
    pub require_ready: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self { require_ready: true }
    }
}

/// The node affinity of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAffinity {
    /// The terms, OR-ed.
    pub terms: Vec<NodeSelectorTerm>,
    /// The requirements translated, as (variable, expression).
    pub requirements: Vec<(String, String)>,
    /// What the selector cannot ensure (the pod's GPU count, disabled requirements).
    pub notes: Vec<String>,
}

impl NodeAffinity {
    /// Whether a node with `labels` matches some term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().any(|t| t.matches(labels))
    }

    fn document(&self) -> serde_json::Value {
        serde_json::json!({
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": self.terms,
                    }
                }
            }
        })
    }

    /// A pod spec fragment (`affinity:`) as pretty JSON, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.document()).unwrap_or_else(|_| "{}".to_owned());
        s.push('\n');
        s
    }

    /// A pod spec fragment (`affinity:`) as YAML, with the requirements and notes as comments
    /// above it. Values are always quoted (`"1"`, `"true"` must stay strings).
    pub fn to_yaml(&self, image: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Node affinity for {image}, from `stackbuild affinity`.");
        for (source, expr) in &self.requirements {
            let _ = writeln!(out, "# {source}={}", shorten(expr, 200));
        }
        for note in &self.notes {
            let _ = writeln!(out, "# note: {note}");
        }
        out.push_str("affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n");
        out.push_str("      nodeSelectorTerms:\n");
        for term in &self.terms {
            out.push_str("        - matchExpressions:\n");
            for e in &term.match_expressions {
                let _ = writeln!(out, "            - key: {}", quote(&e.key));
                let _ = writeln!(out, "              operator: {}", e.operator.as_str());
                if !e.values.is_empty() {
                    let values: Vec<String> = e.values.iter().map(|v| quote(v)).collect();
                    let _ = writeln!(out, "              values: [{}]", values.join(", "));
                }
            }
        }
        out
    }
}

/// A YAML double-quoted scalar (JSON's escapes are YAML's).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}...")
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the image
// ---------------------------------------------------------------------------------------------

/// The config of `image`: an OCI layout directory, `DIR:TAG`, an archive (an OCI layout in a
/// tar, or `docker save`'s format, optionally gzipped), or `ARCHIVE:TAG`.
pub(crate) fn image_config(image: &str) -> Result<ImageConfig, AffinityError> {
    let ImageArg { path, tag } = ImageArg::parse(image);
    if !path.exists() {
        return Err(AffinityError::NotFound { image: image.to_owned() });
    }
    let tag = tag.as_deref();
    if path.is_dir() {
        stackbuild_image::read_layout(&path, tag)
            .map(|i| i.config)
            .map_err(|source| AffinityError::Oci { image: image.to_owned(), source })
    } else {
        archive_config(&path, tag)
    }
}

/// What the hook would gather from a container of `image`: its config's environment, plus
/// `extra` expressions as if given in `io.stackbuild.require.*` pod annotations.
pub fn image_request(image: &str, extra: &[String]) -> Result<ContainerRequest, AffinityError> {
    let config = image_config(image)?;
    let annotations: BTreeMap<String, String> = extra
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("{REQUIRE_ANNOTATION_PREFIX}cli-{}", i + 1), e.clone()))
        .collect();
    Ok(ContainerRequest::from_env(config.config.env.iter().map(String::as_str), &annotations)?)
}

/// The node affinity of `image` (see [`image_request`]).
pub fn for_image(image: &str, extra: &[String], options: &Options) -> Result<NodeAffinity, AffinityError> {
    for_request(&image_request(image, extra)?, *options)
}

/// The node affinity of a container request; with `NVIDIA_DISABLE_REQUIRE` set, only the
/// labels' presence (and readiness) is required, as the hook then checks no requirement.
pub(crate) fn for_request(
    request: &ContainerRequest,
    options: Options,
) -> Result<NodeAffinity, AffinityError> {
    if request.disabled {
        let mut a = node_affinity(&RequirementSet::default(), &options)?;
        a.notes.push(
            "NVIDIA_DISABLE_REQUIRE is set: the hook checks no requirement, so neither does this affinity"
                .to_owned(),
        );
        return Ok(a);
    }
    node_affinity(&request.requirements, &options)
}

/// The JSON members of an archive (gzipped or not) that may be an index, a manifest or a config:
/// `index.json`, `manifest.json`, top-level `*.json` and blobs, of at most 16 MiB each and whose
/// first byte is `{` or `[` (layers are never read past their first byte).
fn archive_json_members(path: &Path) -> Result<BTreeMap<String, Vec<u8>>, AffinityError> {
    let io_err = |source| AffinityError::Archive { path: path.to_owned(), source };
    let mut reader = BufReader::new(File::open(path).map_err(io_err)?);
    let gzip = reader.fill_buf().map_err(io_err)?.starts_with(&[0x1f, 0x8b]);
    let input: Box<dyn Read> =
        if gzip { Box::new(flate2::read::GzDecoder::new(reader)) } else { Box::new(reader) };
    let mut archive = tar::Archive::new(input);
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for entry in archive.entries().map_err(io_err)? {
        let mut entry = entry.map_err(io_err)?;
        if !entry.header().entry_type().is_file() || entry.size() > ARCHIVE_JSON_CAP {
            continue;
        }
        let name = entry.path().map_err(io_err)?.to_string_lossy().trim_start_matches("./").to_owned();
        let top_json = !name.contains('/')
            && Path::new(&name).extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if !(top_json || name.starts_with("blobs/sha256/")) {
            continue;
        }
        let mut first = [0u8; 1];
        if entry.read(&mut first).map_err(io_err)? == 0 || !matches!(first[0], b'{' | b'[') {
            continue;
        }
        let mut bytes = first.to_vec();
        entry.by_ref().take(ARCHIVE_JSON_CAP).read_to_end(&mut bytes).map_err(io_err)?;
        total += bytes.len() as u64;
        if total > ARCHIVE_TOTAL_CAP {
            return Err(AffinityError::ArchiveFormat {
                path: path.to_owned(),
                what: format!("more than {ARCHIVE_TOTAL_CAP} bytes of JSON members"),
            });
        }
        files.insert(name, bytes);
    }
    Ok(files)
}

/// `tag` quoted, or what is meant without one.
fn tag_text(tag: Option<&str>) -> String {
    tag.map_or_else(|| "(the only one)".to_owned(), |t| format!("{t:?}"))
}

/// Reads the config of an archive's image without extracting it: an OCI layout in a tar
/// (`index.json`, tags from `org.opencontainers.image.ref.name` or `io.containerd.image.name`),
/// or else `docker save`'s `manifest.json` (tags from `RepoTags`). Digests are checked.
fn archive_config(path: &Path, tag: Option<&str>) -> Result<ImageConfig, AffinityError> {
    let format_err = |what: String| AffinityError::ArchiveFormat { path: path.to_owned(), what };
    let files = archive_json_members(path)?;
    let checked = |name: &str, hex: &str| -> Result<&[u8], AffinityError> {
        let bytes = files.get(name).ok_or_else(|| format_err(format!("{name} is missing (or not JSON)")))?;
        let actual = hex::encode(Sha256::digest(bytes));
        if actual != hex {
            return Err(format_err(format!("{name} has digest sha256:{actual}")));
        }
        Ok(bytes)
    };
    let blob = |digest: &str| -> Result<&[u8], AffinityError> {
        let hex = stackbuild_cache::sha256_hex(digest).map_err(|e| format_err(e.to_string()))?;
        checked(&format!("blobs/sha256/{hex}"), hex)
    };
    let config_bytes: &[u8] = if let Some(index) = files.get("index.json") {
        let index: stackbuild_image::Index =
            serde_json::from_slice(index).map_err(|e| format_err(format!("index.json: {e}")))?;
        let names = |d: &stackbuild_image::Descriptor| {
            [stackbuild_image::ANNOTATION_REF_NAME, stackbuild_image::ANNOTATION_CONTAINERD_NAME]
                .iter()
                .filter_map(|a| d.annotations.get(*a).cloned())
                .collect::<Vec<_>>()
        };
        let desc = match tag {
            Some(t) => index.manifests.iter().find(|d| names(d).iter().any(|n| n == t)),
            None if index.manifests.len() == 1 => index.manifests.first(),
            None => None,
        };
        let Some(desc) = desc else {
            let tags: Vec<String> = index.manifests.iter().flat_map(names).collect();
            return Err(format_err(format!(
                "no image {} in index.json (names: {})",
                tag_text(tag),
                if tags.is_empty() { "none".to_owned() } else { tags.join(", ") }
            )));
        };
        let manifest: stackbuild_image::Manifest = serde_json::from_slice(blob(&desc.digest)?)
            .map_err(|e| format_err(format!("manifest {}: {e}", desc.digest)))?;
        blob(&manifest.config.digest)?
    } else if let Some(legacy) = files.get("manifest.json") {
        let entries: Vec<stackbuild_image::DockerSaveEntry> =
            serde_json::from_slice(legacy).map_err(|e| format_err(format!("manifest.json: {e}")))?;
        let entry = match tag {
            Some(t) => entries.iter().find(|e| e.repo_tags.iter().any(|r| r == t)),
            None if entries.len() == 1 => entries.first(),
            None => None,
        };
        let entry =
            entry.ok_or_else(|| format_err(format!("no image {} in manifest.json", tag_text(tag))))?;
        let name = entry.config.trim_start_matches("./");
        match name.strip_prefix("blobs/sha256/").or_else(|| name.strip_suffix(".json")) {
            Some(hex) => checked(name, hex)?,
            None => files.get(name).ok_or_else(|| format_err(format!("config {name} is missing")))?,
        }
    } else {
        return Err(format_err("neither index.json nor manifest.json".to_owned()));
    };
    serde_json::from_slice(config_bytes).map_err(|e| format_err(format!("image config: {e}")))
}

// ---------------------------------------------------------------------------------------------
// Translation
// ---------------------------------------------------------------------------------------------

/// Expressions AND-ed (sorted, one block per key after [`normalize`]).
type Conj = Vec<MatchExpression>;
/// Conjunctions OR-ed.
type Dnf = Vec<Conj>;

/// The DNF that always holds.
fn always() -> Dnf {
    vec![Vec::new()]
}

fn one(e: MatchExpression) -> Dnf {
    vec![vec![e]]
}

/// `label >= x` over an integer label.
fn at_least(key: &str, x: u64) -> Dnf {
    match x.checked_sub(1) {
        None => one(MatchExpression::new(key, Operator::Exists, &[])),
        Some(b) => one(MatchExpression::int(key, Operator::Gt, to_i64(b))),
    }
}

/// `label < x` over an integer label.
fn below(key: &str, x: u64) -> Dnf {
    if x == 0 {
        Vec::new()
    } else {
        one(MatchExpression::int(key, Operator::Lt, to_i64(x)))
    }
}

fn to_i64(x: u64) -> i64 {
    // Codes are below 10^12 (see `labels::version_code`).
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// `label op code` over an integer label the hook needs to be known.
fn ordered(key: &str, op: Op, code: u64) -> Dnf {
    match op {
        Op::Ge => at_least(key, code),
        Op::Gt => at_least(key, code + 1),
        Op::Lt => below(key, code),
        Op::Le => below(key, code + 1),
        Op::Eq => one(MatchExpression::new(key, Operator::In, &[&code.to_string()])),
        Op::Ne => vec![vec![
            MatchExpression::new(key, Operator::Exists, &[]),
            MatchExpression::new(key, Operator::NotIn, &[&code.to_string()]),
        ]],
    }
}

/// A translation problem, before it gets the variable's name.
struct Unexpressible(String);

/// One factor as DNF over the node labels; `notes` collects what the selector cannot ensure.
fn factor_dnf(f: &Factor, source: &str, notes: &mut Vec<String>) -> Result<Dnf, Unexpressible> {
    let err = |why: &str| Unexpressible(why.to_owned());
    let code_of = |parts: &[u64]| {
        l::version_code(parts).ok_or_else(|| err("a component is out of range for an integer label code"))
    };
    let name = |v: &Value| match v {
        Value::Name(n) if l::is_label_value(n) => Ok(n.clone()),
        Value::Name(_) => Err(err("the name is not a valid label value")),
        _ => Err(err("expected a name")),
    };
    let mismatch = || err("the value does not fit the key");
    // By how `stackhook labels` publishes the key (its row of `KEYS`).
    Ok(match f.key.spec().labels {
        NodeLabels::VersionCode(label) => {
            let parts = match &f.value {
                Value::Cuda(v) => v.parts(),
                Value::Driver(v) => v.parts(),
                _ => return Err(mismatch()),
            };
            ordered(label, f.op, code_of(parts)?)
        }
        NodeLabels::ComputeCodes { min, max } => {
            let Value::Arch(cc) = &f.value else { return Err(mismatch()) };
            let c = l::compute_code(*cc).ok_or_else(|| err("the minor number is out of range"))?;
            match f.op {
                Op::Ge | Op::Gt => ordered(min, f.op, c),
                Op::Lt | Op::Le => ordered(max, f.op, c),
                Op::Eq => vec![vec![
                    MatchExpression::new(min, Operator::In, &[&c.to_string()]),
                    MatchExpression::new(max, Operator::In, &[&c.to_string()]),
                ]],
                // Every GPU differs from `c` when all are above it or all below it.
                Op::Ne => {
                    let mut d = at_least(min, c + 1);
                    d.extend(below(max, c));
                    d
                }
            }
        }
        // One label, published on every node that has the fact: `=` is membership (and the
        // kubelet's label of the same fact, where there is one), `!=` needs the label present and
        // different.
        NodeLabels::Word { label, kubelet } => {
            let value = name(&f.value)?;
            match f.op {
                Op::Eq => {
                    let mut conj = vec![MatchExpression::new(label, Operator::In, &[&value])];
                    if let Some((kubelet, arch)) = kubelet.zip(l::kubernetes_arch(&value)) {
                        conj.push(MatchExpression::new(kubelet, Operator::In, &[arch]));
                    }
                    vec![conj]
                }
                _ => vec![vec![
                    MatchExpression::new(label, Operator::Exists, &[]),
                    MatchExpression::new(label, Operator::NotIn, &[&value]),
                ]],
            }
        }
        NodeLabels::ModuleFlags { prefix, names } => {
            let module = name(&f.value)?;
            if !names.contains(&module.as_str()) {
                return Err(Unexpressible(format!(
                    "`stackhook labels` flags only the modules {}",
                    names.join(", ")
                )));
            }
            let op = if f.op == Op::Eq { Operator::In } else { Operator::NotIn };
            one(MatchExpression::new(&format!("{prefix}{module}"), op, &["true"]))
        }
        NodeLabels::KernelRelease { release, sanitized, code } => {
            let Value::Kernel(k) = &f.value else { return Err(mismatch()) };
            kernel_dnf(f.op, k.as_str(), KernelLabels { release, sanitized, code })?
        }
        NodeLabels::Count(label) => {
            let Value::Count(n) = &f.value else { return Err(mismatch()) };
            let n = u64::from(*n);
            notes.push(format!(
                "{source}: `{f}` counts the GPUs the container gets: give the pod a matching `nvidia.com/gpu` \
                 limit; node affinity {}",
                match f.op {
                    Op::Ge | Op::Gt | Op::Eq => "only ensures the node has that many",
                    _ => "cannot bound it",
                }
            ));
            match f.op {
                Op::Ge | Op::Eq => at_least(label, n),
                Op::Gt => at_least(label, n + 1),
                // A `gpus<0` never holds; other upper bounds are the pod's business.
                Op::Lt if n == 0 => Vec::new(),
                Op::Lt | Op::Le | Op::Ne => always(),
            }
        }
    })
}

/// The labels of the kernel release ([`NodeLabels::KernelRelease`]).
#[derive(Clone, Copy)]
struct KernelLabels {
    release: &'static str,
    sanitized: &'static str,
    code: &'static str,
}

/// A kernel release factor. The hook orders releases by runs (numbers numerically, text
/// lexically, then the whole text); the node publishes the full release (sanitized, flagged
/// when changed) and the code of its first three numbers, so:
///
/// - `>=`/`>` hold for sure when the node's first `k` numbers exceed the requirement's `k`;
///   for a release that is just `k` numbers (`5.15`), also when they are equal (the requirement
///   is then a prefix of the node's release, or equal to it).
/// - `<`/`<=` hold for sure when the node's first `k` numbers are below the requirement's.
/// - `=` (and the equal case of `>=`/`<=`) needs the unsanitized release label.
/// - `!=` holds unless the node's (sanitized) label equals the requirement's sanitized form.
fn kernel_dnf(op: Op, release: &str, labels: KernelLabels) -> Result<Dnf, Unexpressible> {
    let (numbers, suffix) = l::kernel_prefix(release);
    let parts: Vec<u64> = numbers
        .iter()
        .map(|n| n.parse().map_err(|_| Unexpressible("a number is out of range".to_owned())))
        .collect::<Result<_, _>>()?;
    let pad = l::version_code(&parts)
        .ok_or_else(|| Unexpressible("a number is out of range for an integer label code".to_owned()))?;
    // The smallest code whose first `k` numbers exceed the requirement's (a carry past 999 lands
    // on the next valid code).
    let k = parts.len();
    let weight = [1_000_000u64, 1000, 1];
    let bump = pad + weight.get(k.saturating_sub(1)).copied().unwrap_or(1);
    let canonical = numbers.iter().all(|n| n.len() == 1 || !n.starts_with('0'));
    let pure = suffix.is_empty() && canonical;
    let exact = l::is_label_value(release).then(|| {
        vec![
            MatchExpression::new(labels.release, Operator::In, &[release]),
            MatchExpression::new(labels.sanitized, Operator::DoesNotExist, &[]),
        ]
    });
    let code = labels.code;
    Ok(match op {
        Op::Ge if pure => at_least(code, pad),
        Op::Gt if pure && k < 3 => at_least(code, pad),
        Op::Ge => at_least(code, bump).into_iter().chain(exact).collect(),
        Op::Gt => at_least(code, bump),
        Op::Lt => below(code, pad),
        Op::Le => below(code, pad).into_iter().chain(exact).collect(),
        Op::Eq => match exact {
            Some(conj) => vec![conj],
            None => {
                return Err(Unexpressible(
                    "the release is not a valid label value, so no label can match it exactly".to_owned(),
                ))
            }
        },
        Op::Ne => vec![vec![
            MatchExpression::new(labels.release, Operator::Exists, &[]),
            MatchExpression::new(labels.release, Operator::NotIn, &[&l::sanitize_value(release)]),
        ]],
    })
}

/// AND of two DNFs (distributes), normalized.
fn product(a: &Dnf, b: &Dnf) -> Dnf {
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            if let Some(c) = normalize(x.iter().chain(y).cloned().collect()) {
                out.push(c);
            }
        }
    }
    out
}

/// The constraints a conjunction puts on one key.
#[derive(Default)]
struct KeyConstraint {
    any_of: Option<BTreeSet<String>>,
    none_of: BTreeSet<String>,
    exists: bool,
    absent: bool,
    gt: Option<i64>,
    lt: Option<i64>,
}

/// Sorts a conjunction and merges each key's expressions into the fewest that say the same;
/// `None` when they contradict each other (no node can match).
fn normalize(conj: Conj) -> Option<Conj> {
    let mut keys: BTreeMap<String, KeyConstraint> = BTreeMap::new();
    for e in conj {
        let c = keys.entry(e.key).or_default();
        let bound = e.values.first().and_then(|v| v.parse::<i64>().ok());
        match e.operator {
            Operator::In => {
                let set: BTreeSet<String> = e.values.into_iter().collect();
                c.any_of = Some(match c.any_of.take() {
                    Some(prev) => prev.intersection(&set).cloned().collect(),
                    None => set,
                });
            }
            Operator::NotIn => c.none_of.extend(e.values),
            Operator::Exists => c.exists = true,
            Operator::DoesNotExist => c.absent = true,
            // A bound that is not an integer matches nothing (the API refuses it anyway).
            Operator::Gt => {
                c.gt = Some(match (c.gt, bound) {
                    (_, None) => i64::MAX,
                    (None, Some(b)) => b,
                    (Some(a), Some(b)) => a.max(b),
                });
            }
            Operator::Lt => {
                c.lt = Some(match (c.lt, bound) {
                    (_, None) => i64::MIN,
                    (None, Some(b)) => b,
                    (Some(a), Some(b)) => a.min(b),
                });
            }
        }
    }
    let mut out = Vec::new();
    for (key, c) in keys {
        let e =
            |op: Operator, values: Vec<String>| MatchExpression { key: key.clone(), operator: op, values };
        if c.absent {
            if c.any_of.is_some() || c.exists || c.gt.is_some() || c.lt.is_some() {
                return None;
            }
            out.push(e(Operator::DoesNotExist, Vec::new()));
            continue;
        }
        if let Some(set) = c.any_of {
            let fits = |v: &String| {
                let n = v.parse::<i64>().ok();
                !c.none_of.contains(v)
                    && c.gt.is_none_or(|g| n.is_some_and(|n| n > g))
                    && c.lt.is_none_or(|l| n.is_some_and(|n| n < l))
            };
            let values: Vec<String> = set.into_iter().filter(fits).collect();
            if values.is_empty() {
                return None;
            }
            out.push(e(Operator::In, values));
            continue;
        }
        if let (Some(g), Some(l)) = (c.gt, c.lt) {
            if l <= g.saturating_add(1) {
                return None;
            }
        }
        if c.exists && c.gt.is_none() && c.lt.is_none() {
            out.push(e(Operator::Exists, Vec::new()));
        }
        if !c.none_of.is_empty() {
            out.push(e(Operator::NotIn, c.none_of.into_iter().collect()));
        }
        if let Some(g) = c.gt {
            out.push(e(Operator::Gt, vec![g.to_string()]));
        }
        if let Some(l) = c.lt {
            out.push(e(Operator::Lt, vec![l.to_string()]));
        }
    }
    Some(out)
}

/// Whether expression `b` implies expression `a` (every node matching `b` matches `a`).
fn implies(b: &MatchExpression, a: &MatchExpression) -> bool {
    if a.key != b.key {
        return false;
    }
    if a == b {
        return true;
    }
    let ints =
        |e: &MatchExpression| e.values.iter().map(|v| v.parse::<i64>().ok()).collect::<Option<Vec<_>>>();
    let bound = |e: &MatchExpression| e.values.first().and_then(|v| v.parse::<i64>().ok());
    match (a.operator, b.operator) {
        (Operator::Exists, Operator::In | Operator::Gt | Operator::Lt)
        | (Operator::NotIn, Operator::DoesNotExist) => true,
        (Operator::In, Operator::In) => b.values.iter().all(|v| a.values.contains(v)),
        (Operator::NotIn, Operator::NotIn) => a.values.iter().all(|v| b.values.contains(v)),
        (Operator::NotIn, Operator::In) => b.values.iter().all(|v| !a.values.contains(v)),
        (Operator::Gt, Operator::Gt) => matches!((bound(a), bound(b)), (Some(x), Some(y)) if y >= x),
        (Operator::Lt, Operator::Lt) => matches!((bound(a), bound(b)), (Some(x), Some(y)) if y <= x),
        (Operator::Gt, Operator::In) => {
            matches!((bound(a), ints(b)), (Some(x), Some(v)) if v.iter().all(|n| *n > x))
        }
        (Operator::Lt, Operator::In) => {
            matches!((bound(a), ints(b)), (Some(x), Some(v)) if v.iter().all(|n| *n < x))
        }
        _ => false,
    }
}

/// Whether conjunction `b` implies conjunction `a`.
fn conj_implies(b: &Conj, a: &Conj) -> bool {
    a.iter().all(|x| b.iter().any(|y| implies(y, x)))
}

/// Removes duplicates and terms implied by others, and merges terms that differ in one `In`,
/// keeping the first occurrence's place.
fn simplify(dnf: Dnf) -> Dnf {
    let mut terms: Dnf = Vec::new();
    for t in dnf {
        if !terms.contains(&t) {
            terms.push(t);
        }
    }
    loop {
        let mut changed = false;
        // Merge `common + key In A` and `common + key In B` into `common + key In A∪B`.
        'merge: for i in 0..terms.len() {
            for j in i + 1..terms.len() {
                if let Some(merged) = merge_in(&terms[i], &terms[j]) {
                    terms[i] = merged;
                    terms.remove(j);
                    changed = true;
                    break 'merge;
                }
            }
        }
        // Drop a term that implies another (the other already matches its nodes).
        let mut i = 0;
        while i < terms.len() {
            let redundant = (0..terms.len()).any(|j| {
                j != i && conj_implies(&terms[i], &terms[j]) && (!conj_implies(&terms[j], &terms[i]) || j < i)
            });
            if redundant {
                terms.remove(i);
                changed = true;
            } else {
                i += 1;
            }
        }
        if !changed {
            return terms;
        }
    }
}

fn merge_in(first: &Conj, second: &Conj) -> Option<Conj> {
    if first.len() != second.len() {
        return None;
    }
    let mut diff = first.iter().zip(second).enumerate().filter(|(_, (x, y))| x != y);
    let (at, (left, right)) = diff.next()?;
    let both_in = left.operator == Operator::In && right.operator == Operator::In;
    if diff.next().is_some() || left.key != right.key || !both_in {
        return None;
    }
    let values: BTreeSet<String> = left.values.iter().chain(&right.values).cloned().collect();
    let mut merged = first.clone();
    merged[at] = MatchExpression {
        key: left.key.clone(),
        operator: Operator::In,
        values: values.into_iter().collect(),
    };
    Some(merged)
}

/// The highest CUDA an expression requires with `>=`/`>`, over every entry of the same source,
/// as the doctor finds it for its forward-compatibility check.
fn required_cuda<'a>(
    set: &'a RequirementSet,
    source: &str,
) -> Option<&'a stackcontract::version::CudaVersion> {
    set.entries
        .iter()
        .filter(|r| r.source == source)
        .flat_map(|r| r.expr.0.iter().flat_map(|t| &t.0))
        .filter_map(|f| match (&f.value, f.op) {
            (Value::Cuda(v), Op::Ge | Op::Gt) => Some(v),
            _ => None,
        })
        .max()
}

/// Whether a term's `cuda` factors alone ensure a CUDA major of at least `major`.
fn ensures_cuda_major(term: &Term, major: u64) -> bool {
    term.0.iter().any(|f| match (&f.value, f.op) {
        (Value::Cuda(v), Op::Ge | Op::Gt | Op::Eq) => v.part(0) >= major,
        _ => false,
    })
}

/// One variable's expression as DNF. `need` is the CUDA its `cuda` terms ask for: a term that
/// may pass while the driver supports an older CUDA major (the hook's first passing term is then
/// one without `cuda`, i.e. forward compatibility) also requires that major, or GPUs that run
/// forward compatibility.
fn expr_dnf(
    expr: &Expr,
    source: &str,
    need: Option<u64>,
    notes: &mut Vec<String>,
) -> Result<Dnf, AffinityError> {
    let guard: Option<Dnf> = need.map(|major| {
        let mut g = at_least(l::CUDA_MAX_CODE, major * 1_000_000);
        g.push(vec![MatchExpression::new(l::GPU_FORWARD_COMPAT, Operator::NotIn, &["false"])]);
        g
    });
    let mut out = Vec::new();
    let mut after_cudaless = false;
    for term in &expr.0 {
        let mut dnf = always();
        for f in &term.0 {
            let d = factor_dnf(f, source, notes).map_err(|Unexpressible(why)| {
                AffinityError::Unexpressible { source_name: source.to_owned(), factor: f.to_string(), why }
            })?;
            dnf = product(&dnf, &d);
        }
        let cudaless = !term.has(Key::Cuda);
        if let (Some(g), Some(major)) = (&guard, need) {
            if cudaless || after_cudaless && !ensures_cuda_major(term, major) {
                dnf = product(&dnf, g);
            }
        }
        after_cudaless |= cudaless;
        out.extend(dnf);
    }
    Ok(simplify(out))
}

/// Translates a requirement set into node selector terms (see the module documentation).
pub fn node_affinity(set: &RequirementSet, options: &Options) -> Result<NodeAffinity, AffinityError> {
    let mut notes = Vec::new();
    let mut total = always();
    let mut multiplied: Vec<&str> = Vec::new();
    for req in &set.entries {
        let source = req.source.as_str();
        let has_cuda_term = req.expr.0.iter().any(|t| t.has(Key::Cuda));
        let need = required_cuda(set, source).filter(|_| has_cuda_term).map(|v| v.part(0));
        let dnf = expr_dnf(&req.expr, source, need, &mut notes)?;
        if dnf.is_empty() {
            return Err(AffinityError::Unsatisfiable {
                source_name: source.to_owned(),
                expr: shorten(&req.expr.to_string(), 200),
            });
        }
        if dnf.iter().any(Vec::is_empty) {
            continue; // always holds
        }
        multiplied.push(source);
        let too_many = |terms: usize| AffinityError::TooManyTerms {
            terms,
            max: MAX_TERMS,
            sources: multiplied.join(", "),
        };
        if total.len() * dnf.len() > MAX_TERMS * MAX_TERMS {
            return Err(too_many(total.len() * dnf.len()));
        }
        total = simplify(product(&total, &dnf));
        if total.is_empty() {
            return Err(AffinityError::Contradiction { sources: multiplied.join(", ") });
        }
        if total.len() > MAX_TERMS {
            return Err(too_many(total.len()));
        }
    }
    let mut guard = vec![MatchExpression::new(l::SCHEMA, Operator::In, &[l::SCHEMA_VERSION])];
    if options.require_ready {
        guard.push(MatchExpression::new(l::HOST_READY, Operator::In, &["true"]));
    }
    let total = simplify(product(&total, &vec![guard]));
    let mut seen = BTreeSet::new();
    notes.retain(|n| seen.insert(n.clone()));
    Ok(NodeAffinity {
        terms: total.into_iter().map(|match_expressions| NodeSelectorTerm { match_expressions }).collect(),
        requirements: set.entries.iter().map(|r| (r.source.clone(), r.expr.to_string())).collect(),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(entries: &[(&str, &str)]) -> RequirementSet {
        let mut s = RequirementSet::default();
        for (source, value) in entries {
            s.push(*source, value).unwrap();
        }
        s
    }

    fn no_ready() -> Options {
        Options { require_ready: false }
    }

    fn yaml(entries: &[(&str, &str)]) -> String {
        match node_affinity(&set(entries), &no_ready()) {
            Ok(a) => a.to_yaml("test"),
            Err(e) => format!("error: {e}\n"),
        }
    }

    /// `stackbuild affinity` turns the exact requirements into node selectors within its limit.
    #[test]
    fn affinity_expresses_the_exact_requirements() {
        for version in ["2.1.0", "2.7.0+cu128", "2.11.0", "2.0.0+cu118"] {
            let t: stackcontract::version::PackageVersion = version.parse().unwrap();
            let packages = [stackbuild_check::Package {
                name: "torch",
                version: &t,
                platform: stackbuild_common::Platform::LinuxAmd64,
            }];
            let mut set = RequirementSet::default();
            for r in stackbuild_check::requirements(&packages, &stackbuild_recipe::HostRules::default()) {
                set.push(r.variable, &r.expr).unwrap();
            }
            let affinity = node_affinity(&set, &Options::default());
            assert!(affinity.is_ok(), "{version}: {affinity:?}");
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut m: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        m.insert(l::SCHEMA.to_owned(), l::SCHEMA_VERSION.to_owned());
        m
    }

    #[test]
    fn versions_become_integer_bounds() {
        insta::assert_snapshot!(yaml(&[("NVIDIA_REQUIRE_CUDA", "cuda>=12.1"), ("STACKBUILD_REQUIRE_DRIVER", "driver>=525.60.13,driver<560")]), @r#"
        # Node affinity for test, from `stackbuild affinity`.
        # NVIDIA_REQUIRE_CUDA=cuda>=12.1
        # STACKBUILD_REQUIRE_DRIVER=driver>=525.60.13,driver<560
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions:
                    - key: "stackbuild.io/cuda.max.code"
                      operator: Gt
                      values: ["12000999"]
                    - key: "stackbuild.io/driver.version.code"
                      operator: Gt
                      values: ["525060012"]
                    - key: "stackbuild.io/driver.version.code"
                      operator: Lt
                      values: ["560000000"]
                    - key: "stackbuild.io/labels.schema"
                      operator: In
                      values: ["1"]
        "#);
    }

    #[test]
    fn variables_multiply_out() {
        insta::assert_snapshot!(
            "variables_multiply_out",
            yaml(&[
                ("STACKBUILD_REQUIRE_ARCH", "arch>=8.0,arch<=9.0 arch=12.0"),
                ("STACKBUILD_REQUIRE_MODULES", "module=nvidia_uvm,module!=nouveau"),
                ("STACKBUILD_REQUIRE_MACHINE", "machine=x86_64 machine=aarch64"),
            ])
        );
    }

    #[test]
    fn official_cuda_image_value_stays_small() {
        // `NVIDIA_REQUIRE_CUDA` of the official 12.1.1 images, cut to the 470 and 525 branches.
        let value = "cuda>=12.1 brand=tesla,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 \
                     brand=tesla,driver>=525,driver<526 brand=geforce,driver>=525,driver<526";
        insta::assert_snapshot!("official_cuda_image_value", yaml(&[("NVIDIA_REQUIRE_CUDA", value)]));
    }

    #[test]
    fn selector_matches_what_the_hook_accepts() {
        let a =
            node_affinity(&set(&[("X", "cuda>=12.1"), ("Y", "arch>=8.0,arch<=9.0")]), &Options::default())
                .unwrap();
        let h100 = labels(&[
            (l::CUDA_MAX_CODE, "12002000"),
            (l::GPU_COMPUTE_MIN_CODE, "900"),
            (l::GPU_COMPUTE_MAX_CODE, "900"),
            (l::HOST_READY, "true"),
        ]);
        assert!(a.matches(&h100));
        let mut not_ready = h100.clone();
        not_ready.insert(l::HOST_READY.to_owned(), "false".to_owned());
        assert!(!a.matches(&not_ready));
        let mut mixed = h100.clone();
        mixed.insert(l::GPU_COMPUTE_MAX_CODE.to_owned(), "1200".to_owned());
        assert!(!a.matches(&mixed));
        let mut unknown = h100.clone();
        unknown.remove(l::CUDA_MAX_CODE);
        assert!(!a.matches(&unknown));
        let mut unlabelled = h100;
        unlabelled.remove(l::SCHEMA);
        assert!(!a.matches(&unlabelled));
    }

    #[test]
    fn kernel_requirements() {
        let matches = |expr: &str, release: &str| {
            let a = node_affinity(&set(&[("K", expr)]), &no_ready()).unwrap();
            let mut node = labels(&[(l::KERNEL_RELEASE, &l::sanitize_value(release))]);
            if l::sanitize_value(release) != release {
                node.insert(l::KERNEL_RELEASE_SANITIZED.to_owned(), "true".to_owned());
            }
            if let Some(code) = l::kernel_code(release) {
                node.insert(l::KERNEL_CODE.to_owned(), code.to_string());
            }
            a.matches(&node)
        };
        // The hook's order, where the labels can tell it.
        for (expr, release, want) in [
            ("kernel!=5.15.0-107-generic", "5.15.0-107-generic", false),
            ("kernel!=5.15.0-107-generic", "5.15.0-105-generic", true),
            ("kernel!=6.1.21-v8+", "6.1.21-v8+", false),
            ("kernel!=6.1.21-v8", "6.1.21-v8+", false), // sanitized label: cannot tell
            ("kernel=5.15.0-105-generic", "5.15.0-105-generic", true),
            ("kernel=6.1.21-v8", "6.1.21-v8+", false),
            ("kernel>=5.15", "5.15.0-105-generic", true),
            ("kernel>5.15", "5.15.0-105-generic", true),
            ("kernel>=5.15.0", "5.15.0-105-generic", true),
            ("kernel>5.15.0", "5.15.0-105-generic", false), // conservative: cannot tell
            ("kernel>=5.15.0-105-generic", "5.15.0-105-generic", true),
            ("kernel>=5.15.0-105-generic", "5.15.0-107-generic", false), // conservative
            ("kernel>=5.15.0-105-generic", "5.15.1-1-generic", true),
            ("kernel>=5.15.0-105-generic", "5.14.21", false),
            ("kernel<6.1", "5.15.0-105-generic", true),
            ("kernel<6.1", "6.1.0-27-amd64", false),
            ("kernel<=6.1.0-27-amd64", "6.1.0-27-amd64", true),
            ("kernel<=6.1.0-27-amd64", "6.0.9", true),
            ("kernel<=6.1.0-27-amd64", "6.2.0", false),
        ] {
            assert_eq!(matches(expr, release), want, "{expr} on {release}");
            if want {
                let k: stackcontract::version::KernelRelease = release.parse().unwrap();
                let host = stackcontract::require::HostFacts {
                    kernel: Some(k),
                    gpus: vec![stackcontract::require::GpuFacts::default()],
                    ..Default::default()
                };
                assert!(
                    set(&[("K", expr)]).evaluate(&host).is_empty(),
                    "selector too wide: {expr} on {release}"
                );
            }
        }
    }

    #[test]
    fn errors_name_the_variable() {
        let out: String = [
                yaml(&[("STACKBUILD_REQUIRE_MODULE", "module=i915")]),
                yaml(&[("STACKBUILD_REQUIRE_GPUS", "gpus<0")]),
                yaml(&[("STACKBUILD_REQUIRE_KERNEL", "kernel=6.1.21-v8+")]),
                yaml(&[("STACKBUILD_REQUIRE_DRIVER", "driver>=535.1000")]),
                yaml(&[("A", "driver<500"), ("B", "driver>=535")]),
                yaml(&[
                    ("A", "arch=5.0 arch=6.0 arch=7.0 arch=8.0 arch=9.0 arch=10.0 arch=12.0 arch=12.1"),
                    ("B", "driver=1 driver=2 driver=3 driver=4 driver=5 driver=6 driver=7 driver=8 driver=9"),
                ])
                .lines()
                .filter(|l| l.contains("error") || l.contains("- matchExpressions"))
                .flat_map(|l| [l, "\n"])
                .collect(),
                yaml(&[
                    ("A", "arch=5.0 arch=6.0 arch=7.0 arch=8.0 arch=9.0 arch=10.0 arch=12.0 arch=12.1"),
                    ("B", "driver>=1,driver<2 driver>=3,driver<4 driver>=5,driver<6 driver>=7,driver<8 driver>=9,driver<10 driver>=11,driver<12 driver>=13,driver<14 driver>=15,driver<16 driver>=17,driver<18"),
                ]),
        ]
        .concat();
        insta::assert_snapshot!("errors", out);
    }

    #[test]
    fn gpu_counts_leave_a_note() {
        let a = node_affinity(&set(&[("G", "gpus>=2"), ("H", "gpus<=4")]), &no_ready()).unwrap();
        assert_eq!(a.notes.len(), 2, "{:?}", a.notes);
        assert!(a.matches(&labels(&[(l::GPU_COUNT, "8")])));
        assert!(!a.matches(&labels(&[(l::GPU_COUNT, "1")])));
    }

    #[test]
    fn json_has_the_kubernetes_shape() {
        let a = node_affinity(&set(&[("M", "module!=nouveau")]), &Options::default()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        let terms = &v["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(
            terms[0]["matchExpressions"][0],
            serde_json::json!({"key": "stackbuild.io/host.ready", "operator": "In", "values": ["true"]})
        );
        assert_eq!(
            terms[0]["matchExpressions"][2],
            serde_json::json!({"key": "stackbuild.io/module.nouveau", "operator": "NotIn", "values": ["true"]})
        );
    }

    /// An image with no layers and `env`, as an OCI layout (tag `t`) and an archive.
    fn image(dir: &Path, env: &[&str]) -> (PathBuf, PathBuf) {
        let config = ImageConfig {
            architecture: "amd64".into(),
            os: "linux".into(),
            config: stackbuild_image::RuntimeConfig {
                env: env.iter().map(|e| (*e).to_owned()).collect(),
                ..stackbuild_image::RuntimeConfig::default()
            },
            ..ImageConfig::default()
        };
        let image = stackbuild_image::Image::new(config, Vec::new(), BTreeMap::new()).unwrap();
        let (layout, archive) = (dir.join("layout"), dir.join("image.tar"));
        stackbuild_image::write_layout(&layout, &image, "t").unwrap();
        stackbuild_image::write_archive(&archive, &image, "x:latest").unwrap();
        (layout, archive)
    }

    #[test]
    fn reads_layouts_and_archives() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, archive) = image(dir.path(), &["NVIDIA_REQUIRE_CUDA=cuda>=12.1", "PATH=/bin"]);
        let env = |image: &str| image_config(image).map(|c| c.config.env);
        let want = Ok(vec!["NVIDIA_REQUIRE_CUDA=cuda>=12.1".to_owned(), "PATH=/bin".to_owned()]);
        let layout_s = layout.display().to_string();
        let archive_s = archive.display().to_string();
        assert_eq!(env(&layout_s).map_err(|e| e.to_string()), want);
        assert_eq!(env(&format!("{layout_s}:t")).map_err(|e| e.to_string()), want);
        assert_eq!(env(&archive_s).map_err(|e| e.to_string()), want);
        assert_eq!(env(&format!("{archive_s}:x:latest")).map_err(|e| e.to_string()), want);
        // gzipped
        let gz = dir.path().join("image.tar.gz");
        let mut enc = flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        io::copy(&mut File::open(&archive).unwrap(), &mut enc).unwrap();
        enc.finish().unwrap();
        assert_eq!(env(&gz.display().to_string()).map_err(|e| e.to_string()), want);
        // `docker save` before Docker 25: only manifest.json and `<hex>.json`.
        let config =
            br#"{"architecture":"amd64","os":"linux","config":{"Env":["STACKBUILD_REQUIRE_GPUS=gpus>=2"]}}"#;
        let hex = hex::encode(Sha256::digest(config));
        let manifest = format!(r#"[{{"Config":"{hex}.json","RepoTags":["old:1"],"Layers":[]}}]"#);
        let legacy = dir.path().join("legacy.tar");
        let mut b = tar::Builder::new(File::create(&legacy).unwrap());
        for (name, data) in
            [(format!("{hex}.json"), config.to_vec()), ("manifest.json".to_owned(), manifest.into_bytes())]
        {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, data.as_slice()).unwrap();
        }
        b.finish().unwrap();
        drop(b);
        let legacy_s = legacy.display().to_string();
        assert_eq!(env(&legacy_s).unwrap(), ["STACKBUILD_REQUIRE_GPUS=gpus>=2"]);
        let a = for_image(&format!("{legacy_s}:old:1"), &["module=nvidia_uvm".into()], &no_ready()).unwrap();
        assert_eq!(a.requirements.len(), 2);
        // Errors name what was asked for.
        insta::assert_snapshot!(
            "image_errors",
            [
                env("/nonexistent/image").unwrap_err().to_string(),
                env(&format!("{layout_s}:nope")).unwrap_err().to_string(),
                env(&format!("{legacy_s}:new:2")).unwrap_err().to_string(),
                env(&format!("{archive_s}:nope")).unwrap_err().to_string(),
            ]
            .join("\n")
            .replace(&dir.path().display().to_string(), "[TMP]")
        );
    }

    #[test]
    fn disabled_requirements_are_not_required() {
        let dir = tempfile::tempdir().unwrap();
        let (layout, _) = image(dir.path(), &["NVIDIA_REQUIRE_CUDA=cuda>=12.1", "NVIDIA_DISABLE_REQUIRE=1"]);
        let a = for_image(&layout.display().to_string(), &[], &Options::default()).unwrap();
        assert_eq!(a.terms.len(), 1);
        assert_eq!(a.terms[0].match_expressions.len(), 2, "{:?}", a.terms);
        assert!(a.notes[0].contains("NVIDIA_DISABLE_REQUIRE"));
        // CUDA_VERSION stands for NVIDIA_REQUIRE_CUDA, as in the hook.
        let dir = tempfile::tempdir().unwrap();
        let (layout, _) = image(dir.path(), &["CUDA_VERSION=12.4.1"]);
        let a = for_image(&layout.display().to_string(), &[], &no_ready()).unwrap();
        assert_eq!(a.requirements, [("CUDA_VERSION".to_owned(), "cuda>=12.4".to_owned())]);
    }

    #[test]
    fn normalize_merges_and_detects_contradictions() {
        let e = MatchExpression::new;
        assert_eq!(
            normalize(vec![
                e("k", Operator::Gt, &["5"]),
                e("k", Operator::Gt, &["7"]),
                e("k", Operator::Exists, &[])
            ]),
            Some(vec![e("k", Operator::Gt, &["7"])])
        );
        assert_eq!(
            normalize(vec![e("k", Operator::Gt, &["5"]), e("k", Operator::Lt, &["7"])]).map(|c| c.len()),
            Some(2)
        );
        assert_eq!(normalize(vec![e("k", Operator::Gt, &["5"]), e("k", Operator::Lt, &["6"])]), None);
        assert_eq!(normalize(vec![e("k", Operator::In, &["a"]), e("k", Operator::In, &["b"])]), None);
        assert_eq!(
            normalize(vec![e("k", Operator::In, &["a", "b"]), e("k", Operator::NotIn, &["b"])]),
            Some(vec![e("k", Operator::In, &["a"])])
        );
        assert_eq!(normalize(vec![e("k", Operator::DoesNotExist, &[]), e("k", Operator::Exists, &[])]), None);
        assert_eq!(
            simplify(vec![vec![e("k", Operator::In, &["a"])], vec![e("k", Operator::In, &["b"])]]),
            vec![vec![e("k", Operator::In, &["a", "b"])]]
        );
        assert_eq!(
            simplify(vec![
                vec![e("k", Operator::Gt, &["1"]), e("j", Operator::Exists, &[])],
                vec![e("k", Operator::Gt, &["0"])]
            ]),
            vec![vec![e("k", Operator::Gt, &["0"])]]
        );
    }
}
