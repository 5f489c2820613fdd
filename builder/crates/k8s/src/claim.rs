//! Kubernetes Dynamic Resource Allocation: an image's contract as a `resource.k8s.io/v1`
//! `ResourceClaimTemplate`, so that the scheduler hands a pod only GPUs its hook would accept.
//!
//! NVIDIA's DRA driver (`gpu.nvidia.com`, `cmd/gpu-kubelet-plugin/deviceinfo.go` and `mig.go` of
//! kubernetes-sigs/dra-driver-nvidia-gpu) publishes each GPU and MIG device in a `ResourceSlice`
//! with typed attributes: strings `type`, `productName`, `brand` (NVML's names, mixed case:
//! `Tesla`, `Nvidia`, `NvidiaRTX`, `GeForce`, ...), `architecture`; versions
//! `cudaComputeCapability` (`9.0.0`), `driverVersion` (`570.124.6`: leading zeros dropped) and
//! `cudaDriverVersion` (`12.8.0`). A MIG device carries its parent's. The requirements the hook
//! checks ([`ContainerRequest::from_env`], the same gathering as [`crate::affinity`]) become one
//! CEL selector per variable, over those attributes:
//!
//! - `cuda` against `cudaDriverVersion`, `driver` against `driverVersion`, `arch` against
//!   `cudaComputeCapability`, compared with `compareTo(semver('X.Y.Z'))`. Literals have three
//!   components and no leading zeros, as Kubernetes' strict `semver()` requires (a fourth
//!   non-zero component is folded: the published values have three).
//! - `brand` against `brand.lowerAscii()`: NVML's names lowercased are the words NVIDIA's
//!   `brand=` compares (`NvidiaRTX` -> `nvidiartx`, `GeForceRTX` -> `geforcertx`).
//! - `gpus` decides the request's count (a term whose count does not hold is dropped).
//! - Terms are OR-ed, factors AND-ed, selectors AND-ed (KEP-4381: all selectors of a request must
//!   hold), exactly as the hook combines them.
//! - A term without `cuda` in a variable that has one (the forward-compatibility terms of
//!   `NVIDIA_REQUIRE_CUDA`, `brand=tesla,driver>=470,driver<471`) holds only where the hook lets
//!   it: on a device whose CUDA major is the one needed (minor-version compatibility), or on a
//!   product the knowledge base says runs the `cuda-compat` package (data-center GPUs): the
//!   hook's `L4-FORWARD-COMPAT-UNSUPPORTED` rule, decided by the first term that holds.
//!   A product the knowledge base does not name is not selected through such a term: the hook
//!   starts it with a warning because it cannot tell, and a scheduler that has a choice should
//!   take a device known to work.
//! - `kernel`, `module`, `machine` and `platform` are facts of the node, which no device
//!   attribute publishes: they are left to the hook at container start (and to `stackbuild
//!   affinity`'s labels), and a note says so.
//!
//! Every attribute a selector reads is guarded (`'cudaDriverVersion' in ...`) at its front, so a
//! device that lacks one is not selected instead of aborting the allocation with a CEL error (the
//! `CELDeviceSelector` contract: an unknown attribute domain is an empty map, an unknown attribute
//! an evaluation error).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{json, Value as Json};
use stackcontract::image::ContainerRequest;
use stackcontract::kb;
use stackcontract::require::{DeviceAttribute, Expr, Factor, Key, Op, RequirementSet, Term, Value};

use crate::affinity::{self, AffinityError};

/// The DRA driver's name and attribute domain.
pub const DOMAIN: &str = "gpu.nvidia.com";
/// The `DeviceClass` of whole GPUs (the driver's Helm chart).
pub(crate) const GPU_CLASS: &str = "gpu.nvidia.com";
/// The `DeviceClass` of MIG devices.
pub(crate) const MIG_CLASS: &str = "mig.nvidia.com";
/// Kubernetes' limit on one selector's expression (`CELSelectorExpressionMaxLength`).
pub(crate) const MAX_EXPRESSION: usize = 10 * 1024;
/// Most devices one request may be allocated (`AllocationResultsMaxSize`).
pub(crate) const MAX_COUNT: u32 = 32;
/// How the selectors read the attributes.
const ATTRS: &str = "device.attributes['gpu.nvidia.com']";

/// Why no claim could be produced.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The image or its requirements could not be read.
    #[error(transparent)]
    Image(#[from] AffinityError),
    /// A requirement can hold on no device with the count asked for.
    #[error("{variable}: `{expr}` cannot hold for {count} GPU(s){hint}")]
    Unsatisfiable {
        /// The variable or annotation.
        variable: String,
        /// The expression.
        expr: String,
        /// The count the claim asks for.
        count: u32,
        /// What to change.
        hint: String,
    },
    /// `--count` outside what a request may ask for.
    #[error("--count {count}: a request asks for 1 to {MAX_COUNT} devices")]
    Count {
        /// The count given.
        count: u32,
    },
    /// `--name` is not a Kubernetes object name.
    #[error("--name {name:?}: expected a DNS subdomain name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)")]
    Name {
        /// The name given.
        name: String,
    },
    /// A selector is longer than Kubernetes accepts.
    #[error("{variable}: its selector is {len} characters, above Kubernetes' limit of {MAX_EXPRESSION}")]
    TooLong {
        /// The variable or annotation.
        variable: String,
        /// The selector's length.
        len: usize,
    },
}

/// What `stackbuild claim` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The template's name (`metadata.name`).
    pub name: String,
    /// How many devices; `None`: the fewest the `gpus` requirements allow.
    pub count: Option<u32>,
    /// Accept a MIG device when no whole GPU is available (`firstAvailable`).
    pub mig: bool,
}

/// A device attribute the selectors read, in the order of their guards: those of keys (their
/// names are in the keys' rows of `KEYS`, [`DeviceAttribute`]), and the product name that
/// forward compatibility is decided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Attr {
    CudaDriverVersion,
    DriverVersion,
    CudaComputeCapability,
    Brand,
    ProductName,
}

impl Attr {
    const ALL: [Attr; 5] = [
        Attr::CudaDriverVersion,
        Attr::DriverVersion,
        Attr::CudaComputeCapability,
        Attr::Brand,
        Attr::ProductName,
    ];

    /// The key whose device attribute this is.
    fn key(self) -> Option<Key> {
        match self {
            Attr::CudaDriverVersion => Some(Key::Cuda),
            Attr::DriverVersion => Some(Key::Driver),
            Attr::CudaComputeCapability => Some(Key::Arch),
            Attr::Brand => Some(Key::Brand),
            Attr::ProductName => None,
        }
    }

    /// The attribute of `key`'s device attribute.
    fn of(key: Key) -> Option<Attr> {
        Attr::ALL.into_iter().find(|a| a.key() == Some(key))
    }

    fn name(self) -> &'static str {
        match self.key() {
            Some(key) => key.spec().device.name().unwrap_or_default(),
            None => "productName",
        }
    }
}

/// One CEL selector of the request: a requirement variable in device terms.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Selector {
    /// The variable or annotation it comes from.
    pub source: String,
    /// The requirement as the image states it.
    pub requirement: String,
    /// The CEL expression.
    pub expression: String,
}

/// The claim: the request's selectors and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The template's name.
    pub name: String,
    /// Devices per claim.
    pub count: u32,
    /// Whether a MIG device is an alternative.
    pub mig: bool,
    /// The selectors, all of which a device must satisfy.
    pub selectors: Vec<Selector>,
    /// What the claim does not say, and why.
    pub notes: Vec<String>,
}

/// The claim of `image` (as `affinity` takes it), with `extra` requirements as pod annotations
/// would add them.
pub fn for_image(image: &str, extra: &[String], options: &Options) -> Result<Claim, ClaimError> {
    for_request(&affinity::image_request(image, extra)?, options)
}

/// The claim of a container request; with `NVIDIA_DISABLE_REQUIRE` set, any GPU.
pub fn for_request(request: &ContainerRequest, options: &Options) -> Result<Claim, ClaimError> {
    if !is_dns_subdomain(&options.name) {
        return Err(ClaimError::Name { name: options.name.clone() });
    }
    if let Some(count) = options.count.filter(|c| !(1..=MAX_COUNT).contains(c)) {
        return Err(ClaimError::Count { count });
    }
    let mut notes = Vec::new();
    let set = if request.disabled {
        notes.push(
            "NVIDIA_DISABLE_REQUIRE is set: the hook checks no requirement, so neither does this claim"
                .into(),
        );
        RequirementSet::default()
    } else {
        request.requirements.clone()
    };
    let count = match options.count {
        Some(c) => c,
        None => (1..=MAX_COUNT).find(|&c| counts_hold(&set, c)).unwrap_or(1),
    };
    let selectors = selectors(&set, count, &mut notes)?;
    Ok(Claim { name: options.name.clone(), count, mig: options.mig, selectors, notes })
}

/// The template name for an image path: its last component, lowercased, anything but letters and
/// digits made `-`, plus `-gpu`.
pub fn default_name(image: &str) -> String {
    let path = stackbuild_common::ImageArg::parse(image).path;
    let base = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let base = base.split('.').next().unwrap_or_default().to_ascii_lowercase();
    let mut name: String = base.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    name = name.trim_matches('-').chars().take(200).collect();
    if name.is_empty() {
        "stackbuild-gpu".into()
    } else {
        format!("{name}-gpu")
    }
}

/// A DNS-1123 subdomain (`metadata.name` of most objects).
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether every requirement can still hold for `count` GPUs (its `gpus` factors folded).
fn counts_hold(set: &RequirementSet, count: u32) -> bool {
    set.entries
        .iter()
        .all(|r| r.nvidia_expr().0.iter().any(|t| t.0.iter().all(|f| gpus_holds(f, count) != Some(false))))
}

/// A factor on the device count ([`DeviceAttribute::Count`], `gpus`) decided for `count`; `None`
/// for other keys.
fn gpus_holds(f: &Factor, count: u32) -> Option<bool> {
    match (f.key.spec().device, &f.value) {
        (DeviceAttribute::Count, Value::Count(n)) => Some(f.op.holds(count.cmp(n))),
        _ => None,
    }
}

/// One AND-ed part of a term, in CEL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Piece {
    cel: String,
    /// `brand=<word>` (an `=` on a word attribute, with the attribute): pieces that differ only
    /// by it are merged into one `in` list.
    word_eq: Option<(Attr, String)>,
}

/// A factor in device terms: `Ok(None)` holds on every device (a fact of the node, or a count
/// that holds), `Err(())` on none.
#[allow(clippy::result_unit_err)]
fn piece(
    f: &Factor,
    count: u32,
    attrs: &mut BTreeSet<Attr>,
    host_keys: &mut BTreeSet<Key>,
) -> Result<Option<Piece>, ()> {
    // By the key's device attribute (its row of `KEYS`).
    match (f.key.spec().device, Attr::of(f.key)) {
        (DeviceAttribute::Version(_), Some(attr)) => {
            let parts = match &f.value {
                Value::Cuda(v) => v.parts().to_vec(),
                Value::Driver(v) => v.parts().to_vec(),
                Value::Arch(cc) => vec![u64::from(cc.major), u64::from(cc.minor)],
                Value::Kernel(_) | Value::Count(_) | Value::Name(_) => {
                    host_keys.insert(f.key);
                    return Ok(None);
                }
            };
            match version_cmp(attr, f.op, &parts) {
                Fit::Const(true) => Ok(None),
                Fit::Const(false) => Err(()),
                Fit::Cel(cel) => {
                    attrs.insert(attr);
                    Ok(Some(Piece { cel, word_eq: None }))
                }
            }
        }
        (DeviceAttribute::Word(_), Some(attr)) => {
            let Value::Name(word) = &f.value else {
                host_keys.insert(f.key);
                return Ok(None);
            };
            attrs.insert(attr);
            let word = word.to_ascii_lowercase();
            let op = if f.op == Op::Eq { "==" } else { "!=" };
            let cel = format!("{ATTRS}.{}.lowerAscii() {op} {}", attr.name(), cel_string(&word));
            Ok(Some(Piece { cel, word_eq: (f.op == Op::Eq).then_some((attr, word)) }))
        }
        (DeviceAttribute::Count, _) => {
            if gpus_holds(f, count) == Some(true) {
                Ok(None)
            } else {
                Err(())
            }
        }
        // A fact of the node, not of a device: the hook's to check.
        (DeviceAttribute::Node | DeviceAttribute::Version(_) | DeviceAttribute::Word(_), _) => {
            host_keys.insert(f.key);
            Ok(None)
        }
    }
}

/// A version comparison fitted to the published three components.
enum Fit {
    Const(bool),
    Cel(String),
}

/// `attr op X.Y.Z` in CEL. The published values have three components (missing ones are zero,
/// as the hook compares them); a literal with a non-zero fourth component lies strictly between
/// two of them, so it becomes a comparison with its first three.
fn version_cmp(attr: Attr, op: Op, parts: &[u64]) -> Fit {
    let part = |i: usize| parts.get(i).copied().unwrap_or(0);
    let lit = format!("{}.{}.{}", part(0), part(1), part(2));
    let beyond = parts.iter().skip(3).any(|&p| p != 0);
    let op = match (beyond, op) {
        (false, op) => op,
        (true, Op::Ge | Op::Gt) => Op::Gt,
        (true, Op::Le | Op::Lt) => Op::Le,
        (true, Op::Eq) => return Fit::Const(false),
        (true, Op::Ne) => return Fit::Const(true),
    };
    let op = match op {
        Op::Eq => "==",
        Op::Ne => "!=",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
    };
    Fit::Cel(format!("{ATTRS}.{}.compareTo(semver('{lit}')) {op} 0", attr.name()))
}

/// A CEL string literal.
fn cel_string(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A term in device terms: `None` when it holds on no device; an empty list holds on all.
fn term_pieces(
    t: &Term,
    count: u32,
    attrs: &mut BTreeSet<Attr>,
    host_keys: &mut BTreeSet<Key>,
) -> Option<Vec<Piece>> {
    let mut out = Vec::new();
    for f in &t.0 {
        match piece(f, count, attrs, host_keys) {
            Err(()) => return None,
            Ok(Some(p)) if !out.contains(&p) => out.push(p),
            Ok(_) => {}
        }
    }
    Some(out)
}

/// The words of a group of terms that differ only by one `brand=`, with their attribute; `None`:
/// any word (a member has no such piece).
type Words = Option<(Attr, Vec<String>)>;

/// The OR of terms, those that differ only by one `brand=` merged into `brand in [...]`.
fn any_of(terms: &[Vec<Piece>]) -> String {
    if terms.iter().any(Vec::is_empty) {
        return "true".into();
    }
    // Group by everything but a `brand=` piece, in order of first appearance; the words of one
    // group are of one attribute.
    let mut groups: Vec<(Vec<Piece>, Words)> = Vec::new();
    for t in terms {
        let eqs: Vec<&Piece> = t.iter().filter(|p| p.word_eq.is_some()).collect();
        let (rest, eq) = if eqs.len() == 1 {
            (t.iter().filter(|p| p.word_eq.is_none()).cloned().collect(), eqs[0].word_eq.clone())
        } else {
            (t.clone(), None)
        };
        let joins = |words: &Words| match (words, &eq) {
            (Some((a, _)), Some((b, _))) => a == b,
            _ => true,
        };
        match groups.iter_mut().find(|(r, words)| *r == rest && joins(words)) {
            Some((_, words)) => match (words.as_mut(), eq) {
                (Some((_, w)), Some((_, b))) if !w.contains(&b) => w.push(b),
                (Some(_), Some(_)) => {}
                // A member without the brand piece holds for every brand.
                _ => *words = None,
            },
            None => groups.push((rest, eq.map(|(attr, b)| (attr, vec![b])))),
        }
    }
    let parts: Vec<String> = groups
        .into_iter()
        .map(|(rest, words)| {
            let mut cels: Vec<String> = rest.into_iter().map(|p| p.cel).collect();
            match words {
                Some((attr, w)) if w.len() == 1 => {
                    cels.push(format!("{ATTRS}.{}.lowerAscii() == {}", attr.name(), cel_string(&w[0])));
                }
                Some((attr, w)) => {
                    let list: Vec<String> = w.iter().map(|b| cel_string(b)).collect();
                    cels.push(format!("{ATTRS}.{}.lowerAscii() in [{}]", attr.name(), list.join(", ")));
                }
                None => {}
            }
            if cels.is_empty() {
                "true".into()
            } else {
                cels.join(" && ")
            }
        })
        .collect();
    if parts.len() == 1 {
        parts.into_iter().next().unwrap_or_default()
    } else {
        parts.iter().map(|p| format!("({p})")).collect::<Vec<_>>().join(" ||\n  ")
    }
}

/// The highest `cuda>=`/`cuda>` version a requirement names, as the hook reads what an image
/// needs.
fn needed_cuda(expr: &Expr) -> Option<u64> {
    expr.0
        .iter()
        .flat_map(|t| &t.0)
        .filter(|f| f.key == Key::Cuda && matches!(f.op, Op::Ge | Op::Gt))
        .filter_map(|f| match &f.value {
            Value::Cuda(v) => Some(v.part(0)),
            _ => None,
        })
        .max()
}

/// Products that run the `cuda-compat` forward-compatibility package, as a CEL condition on
/// `productName` with the knowledge base's matching rule: a model's patterns, case-insensitively
/// at word boundaries, the longest match winning (so the longer patterns of other models that
/// contain a forward-compatible one are excluded).
pub fn forward_compat_products() -> String {
    let all = kb::all_gpus();
    let fc: BTreeSet<String> = all
        .iter()
        .filter(|g| g.forward_compat)
        .flat_map(|g| g.patterns.iter().map(|p| p.to_ascii_lowercase()))
        .collect();
    let other: BTreeSet<String> = all
        .iter()
        .filter(|g| !g.forward_compat)
        .flat_map(|g| g.patterns.iter().map(|p| p.to_ascii_lowercase()))
        .filter(|q| fc.iter().any(|p| q.len() > p.len() && word_in(q, p)))
        .collect();
    let product = format!("{ATTRS}.productName.lowerAscii()");
    let mut cel = format!("{product}.matches({})", cel_string(&word_regex(&fc)));
    if !other.is_empty() {
        let _ = write!(cel, " && !{product}.matches({})", cel_string(&word_regex(&other)));
    }
    cel
}

/// Whether `needle` is in `haystack` with no letter or digit on either side.
fn word_in(haystack: &str, needle: &str) -> bool {
    let b = haystack.as_bytes();
    haystack.match_indices(needle).any(|(i, _)| {
        let end = i + needle.len();
        !(b.get(end).is_some_and(u8::is_ascii_alphanumeric) || i > 0 && b[i - 1].is_ascii_alphanumeric())
    })
}

/// An RE2 pattern matching any of `words` at word boundaries (letters and digits), runs of spaces
/// as one.
fn word_regex(words: &BTreeSet<String>) -> String {
    let alts: Vec<String> = words
        .iter()
        .map(|w| {
            let mut out = String::new();
            for part in w.split_whitespace() {
                if !out.is_empty() {
                    out.push_str(" +");
                }
                for c in part.chars() {
                    if !c.is_ascii_alphanumeric() {
                        out.push('\\');
                    }
                    out.push(c);
                }
            }
            out
        })
        .collect();
    format!("(^|[^a-z0-9])({})([^a-z0-9]|$)", alts.join("|"))
}

/// The selectors of `set` for `count` devices.
fn selectors(set: &RequirementSet, count: u32, notes: &mut Vec<String>) -> Result<Vec<Selector>, ClaimError> {
    let mut host_keys = BTreeSet::new();
    let mut out = Vec::new();
    for req in &set.entries {
        let mut attrs = BTreeSet::new();
        // As NVIDIA's evaluator reads it: the alternatives met before it reaches a key it has
        // no rule for (libnvidia-container's dsl.c), which the hook refuses as NVIDIA does.
        let expr = req.nvidia_expr();
        let has_cuda = expr.0.iter().any(|t| t.has(Key::Cuda));
        // Each term that can hold, with whether the hook accepts it without forward compatibility.
        let terms: Vec<(Vec<Piece>, bool)> = expr
            .0
            .iter()
            .filter_map(|t| term_pieces(t, count, &mut attrs, &mut host_keys).map(|p| (p, t.has(Key::Cuda))))
            .collect();
        if terms.is_empty() {
            let unsupported = req.unsupported_keys();
            let hint = if !unsupported.is_empty() && expr.0.is_empty() {
                format!(
                    "; NVIDIA's evaluator has no rule for `{}` and reaches it on every device, so NVIDIA's hook \
                     (and stackhook) refuse the container as an invalid expression: move such factors to a \
                     STACKBUILD_REQUIRE_* variable",
                    unsupported.join("`, `")
                )
            } else if expr.0.iter().any(|t| t.has(Key::Gpus)) {
                "; give --count a value that satisfies it".to_owned()
            } else {
                String::new()
            };
            return Err(ClaimError::Unsatisfiable {
                variable: req.source.clone(),
                expr: req.written(),
                count,
                hint,
            });
        }
        let body = match needed_cuda(&expr).filter(|_| has_cuda) {
            Some(major) if terms.iter().any(|(_, c)| !c) => {
                let cuda = Attr::CudaDriverVersion;
                attrs.insert(cuda);
                attrs.insert(Attr::ProductName);
                let fc = format!(
                    "({ATTRS}.{}.compareTo(semver('{major}.0.0')) >= 0 || {})",
                    cuda.name(),
                    forward_compat_products()
                );
                first_holding(&terms, &fc)
            }
            _ => {
                let all: Vec<Vec<Piece>> = terms.into_iter().map(|(p, _)| p).collect();
                any_of(&all)
            }
        };
        if body == "true" {
            continue;
        }
        let guards: Vec<String> = attrs.iter().map(|a| format!("'{}' in {ATTRS}", a.name())).collect();
        let expression = format!("{} &&\n({body})", guards.join(" &&\n"));
        if expression.len() > MAX_EXPRESSION {
            return Err(ClaimError::TooLong { variable: req.source.clone(), len: expression.len() });
        }
        out.push(Selector { source: req.source.clone(), requirement: req.written(), expression });
    }
    if !host_keys.is_empty() {
        let keys: Vec<String> = host_keys.iter().map(|k| format!("`{}`", k.as_str())).collect();
        let verb = if keys.len() == 1 { "describes" } else { "describe" };
        notes.push(format!(
            "{} {verb} the node, not a device, so no selector carries it: the hook checks it at container \
             start (`stackbuild affinity` can place the pod by node labels)",
            keys.join(", ")
        ));
    }
    Ok(out)
}

/// The hook's rule for a variable with forward-compatibility terms: the first term that holds
/// decides; a `cuda` term is accepted, any other only where `fc` holds. Consecutive terms of one
/// kind are one run: `cuda-run || (other-run ? fc : next)`.
fn first_holding(terms: &[(Vec<Piece>, bool)], fc: &str) -> String {
    let mut runs: Vec<(bool, Vec<Vec<Piece>>)> = Vec::new();
    for (pieces, cuda) in terms {
        match runs.last_mut() {
            Some((kind, members)) if kind == cuda => members.push(pieces.clone()),
            _ => runs.push((*cuda, vec![pieces.clone()])),
        }
    }
    if runs.first().is_some_and(|(cuda, members)| *cuda && members.iter().any(Vec::is_empty)) {
        return "true".into();
    }
    let mut text = String::new();
    for (i, (cuda, members)) in runs.iter().enumerate().rev() {
        let run = any_of(members);
        let last = i + 1 == runs.len();
        text = match (cuda, last) {
            (true, true) => format!("({run})"),
            (false, true) => format!("({run}) &&\n  {fc}"),
            (true, false) => format!("({run}) ||\n  ({text})"),
            (false, false) => format!("({run}) ?\n  {fc} :\n  ({text})"),
        };
    }
    text
}

impl Claim {
    /// The request's `exactly` (or one `firstAvailable` entry) for a device class.
    fn device_request(&self, class: &str, name: Option<&str>) -> Json {
        let mut r = serde_json::Map::new();
        if let Some(name) = name {
            r.insert("name".into(), json!(name));
        }
        r.insert("deviceClassName".into(), json!(class));
        r.insert("allocationMode".into(), json!("ExactCount"));
        r.insert("count".into(), json!(self.count));
        if !self.selectors.is_empty() {
            let cels: Vec<Json> =
                self.selectors.iter().map(|s| json!({"cel": {"expression": s.expression}})).collect();
            r.insert("selectors".into(), Json::Array(cels));
        }
        Json::Object(r)
    }

    /// The `resource.k8s.io/v1` `ResourceClaimTemplate`.
    pub fn template(&self) -> Json {
        let request = if self.mig {
            json!({
                "name": "gpu",
                "firstAvailable": [
                    self.device_request(GPU_CLASS, Some("whole")),
                    self.device_request(MIG_CLASS, Some("mig")),
                ],
            })
        } else {
            json!({"name": "gpu", "exactly": self.device_request(GPU_CLASS, None)})
        };
        json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": self.name},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        })
    }

    /// A Pod whose container gets the template's devices; `image` is the reference the pod pulls.
    pub fn pod(&self, image: &str) -> Json {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": self.name}],
                "containers": [{
                    "name": "main",
                    "image": image,
                    "resources": {"claims": [{"name": "gpu"}]},
                }],
            },
        })
    }

    /// Both documents as YAML, headed by comments naming each selector's source.
    pub fn to_yaml(&self, image: &str, pod_image: &str) -> String {
        let mut out = format!(
            "# ResourceClaimTemplate for {image}: {} device(s) of class {GPU_CLASS}{} whose attributes satisfy the \
             image's requirements (stackbuild claim).\n",
            self.count,
            if self.mig { ", or of class mig.nvidia.com when no whole GPU is available" } else { "" },
        );
        for (i, s) in self.selectors.iter().enumerate() {
            let _ = writeln!(
                out,
                "# selector {}: {} = {}",
                i + 1,
                s.source,
                affinity::shorten(&s.requirement, 160)
            );
        }
        if self.selectors.is_empty() {
            out.push_str("# no selector: the image states no requirement a device attribute describes\n");
        }
        for n in &self.notes {
            let _ = writeln!(out, "# note: {n}");
        }
        out.push_str(&yaml(&self.template()));
        out.push_str("---\n# A Pod that uses it (the image as your registry serves it).\n");
        out.push_str(&yaml(&self.pod(pod_image)));
        out
    }

    /// Both documents as a JSON `List` (what `kubectl apply -f` takes).
    pub fn to_json(&self, pod_image: &str) -> String {
        let list =
            json!({"apiVersion": "v1", "kind": "List", "items": [self.template(), self.pod(pod_image)]});
        let mut s = serde_json::to_string_pretty(&list).unwrap_or_default();
        s.push('\n');
        s
    }
}

fn yaml(v: &Json) -> String {
    serde_norway::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests;
