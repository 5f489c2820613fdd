//! The stackbuild recipe: parsed, validated, with errors that point at file, line and column.
//!
//! It depends only on `stackbuild-common`: the stages read the recipe, never the other way round.
//!
//! - `recipe`: the recipe file, with errors that point at file, line and column.

mod recipe;

pub use recipe::{
    git_dependency, git_subdirectory, lock_format_of_name, url_dependency, Base, Bootstrap, BuildSection,
    Comparison, HostRules, IndexSources, LocalWheel, LockFormat, Patch, PatchChange, PatchTarget,
    PythonSection, Recipe, Source, SourceOrigin, UrlDependency, VersionRange,
};
