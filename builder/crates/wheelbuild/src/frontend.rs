//! The PEP 517 build frontend that runs inside the sandbox, under the image's own interpreter.
//!
//! It is the part of pip's and `build`'s frontends that calls the backend's hooks
//! (<https://peps.python.org/pep-0517/>): import the backend named by `build-backend` (with
//! `backend-path` first on `sys.path`), then call `get_requires_for_build_wheel`,
//! `prepare_metadata_for_build_wheel` or `build_wheel`, and write what the hook returned into the
//! output directory as JSON. Everything about the environment (which packages are importable,
//! which variables are set) is prepared outside; nothing of the recipe or the package is an
//! option of the interpreter: the values follow `-c CODE` as `sys.argv`.

/// The frontend: `argv[1]` the hook (`requires`, `metadata`, `wheel`, and for editable installs
/// `requires-editable` and `editable`), `argv[2]` the project
/// directory, `argv[3]` the output directory, `argv[4]` the backend, `argv[5]` `backend-path` as
/// JSON. Python 3.6 and later.
pub(crate) const DRIVER: &str = r#"import importlib, json, os, sys
hook, src, out, backend, paths = sys.argv[1:6]
os.chdir(src)
sys.path[:0] = [os.path.join(src, p) for p in json.loads(paths)]
module, _, attr = backend.partition(":")
hooks = importlib.import_module(module)
for part in filter(None, attr.split(".")):
    hooks = getattr(hooks, part)
if hook == "requires":
    f = getattr(hooks, "get_requires_for_build_wheel", None)
    result = list(f({})) if f else []
elif hook == "requires-editable":
    f = getattr(hooks, "get_requires_for_build_editable", None)
    result = list(f({})) if f else []
elif hook == "editable":
    f = getattr(hooks, "build_editable", None)
    if f is None:
        sys.exit("the build backend %s has no build_editable (PEP 660): install it as a wheel" % backend)
    result = {"wheel": f(out, {})}
elif hook == "metadata":
    f = getattr(hooks, "prepare_metadata_for_build_wheel", None)
    result = {"dist_info": f(out, {})} if f else {"wheel": hooks.build_wheel(out, {})}
else:
    result = {"wheel": hooks.build_wheel(out, {})}
with open(os.path.join(out, "result.json"), "w") as o:
    json.dump(result, o)
"#;

/// The hook a run calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    /// `get_requires_for_build_wheel`.
    Requires,
    /// `prepare_metadata_for_build_wheel` (or `build_wheel` where the backend lacks it).
    Metadata,
    /// `build_wheel`.
    Wheel,
    /// `get_requires_for_build_editable` (PEP 660).
    RequiresEditable,
    /// `build_editable` (PEP 660).
    Editable,
}

impl Hook {
    pub(crate) const fn arg(self) -> &'static str {
        match self {
            Self::Requires => "requires",
            Self::Metadata => "metadata",
            Self::Wheel => "wheel",
            Self::RequiresEditable => "requires-editable",
            Self::Editable => "editable",
        }
    }
}
