//! The recipe `init` writes, and its report: the plan rendered as TOML with a comment that says
//! where each part came from, and the decisions for a person.

use std::fmt::Write as _;
use std::path::Path;

use super::{comment, relative, Plan};

impl Plan {
    /// The recipe to be written at `recipe`, with a comment that says where each part came
    /// from; paths are relative to the recipe's directory where they can be.
    #[allow(clippy::too_many_lines)] // the recipe's sections, in order
    pub fn to_toml(&self, recipe: &Path) -> String {
        let recipe_dir = recipe.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let file =
            recipe.file_name().map_or_else(|| "stackbuild.toml".into(), |n| n.to_string_lossy().into_owned());
        let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
        let list =
            |items: &[String]| format!("[{}]", items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", "));
        let mut out = String::new();
        let mut inputs: Vec<String> = Vec::new();
        for p in &self.inputs {
            let name = relative(p, recipe_dir);
            if !inputs.contains(&name) {
                inputs.push(name);
            }
        }
        let _ = writeln!(out, "# Written by `stackbuild init` from {}.", comment(&inputs.join(", ")));
        let file = comment(&file);
        let _ = writeln!(
            out,
            "#   stackbuild check {file}    # the stack, what the host must provide, every conflict"
        );
        let _ = writeln!(out, "#   stackbuild {file}          # build the image\n");
        out.push_str("[image]\n");
        let _ = writeln!(out, "name = {}", q(&self.name));
        out.push_str("tag = \"latest\"\nplatforms = [\"linux/amd64\"]\n");
        if let Some(e) = &self.entrypoint {
            let _ = writeln!(out, "entrypoint = {}", list(e));
        }
        let _ = writeln!(out, "cmd = {}", list(self.cmd.as_deref().unwrap_or(&["python3".to_owned()])));
        let _ = writeln!(out, "workdir = {}", q(&self.workdir));
        if let Some(u) = &self.user {
            let _ = writeln!(out, "user = {}", q(u));
        }
        let mut env = self.env.clone();
        env.entry("PYTHONUNBUFFERED".into()).or_insert_with(|| "1".into());
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{} = {}", q(k), q(v))).collect();
        let _ = writeln!(out, "env = {{ {} }}", env.join(", "));
        if !self.labels.is_empty() {
            let labels: Vec<String> =
                self.labels.iter().map(|(k, v)| format!("{} = {}", q(k), q(v))).collect();
            let _ = writeln!(out, "labels = {{ {} }}", labels.join(", "));
        }
        let _ = writeln!(
            out,
            "\n[base]\n{} = {}\npackages = {}",
            self.distro.0,
            q(&self.distro.1),
            list(&self.apt)
        );
        let _ = writeln!(out, "\n[python]\nversion = {}", q(&self.python));
        if let Some(l) = &self.lock {
            let _ = writeln!(out, "lock = {}", q(&relative(l, recipe_dir)));
        } else {
            out.push_str("packages = [\n");
            for (r, at) in &self.packages {
                let _ = writeln!(out, "  {},  # {}", q(r), comment(at));
            }
            out.push_str("]\n");
            if !self.overrides.is_empty() {
                out.push_str("overrides = [\n");
                for (r, at) in &self.overrides {
                    let _ = writeln!(out, "  {},  # {}", q(r), comment(at));
                }
                out.push_str("]\n");
            }
            if !self.constraints.is_empty() {
                out.push_str("constraints = [\n");
                for (r, at) in &self.constraints {
                    let _ = writeln!(out, "  {},  # {}", q(r), comment(at));
                }
                out.push_str("]\n");
            }
        }
        if let Some(i) = &self.index {
            let _ = writeln!(out, "index = {}", q(i));
        }
        if !self.extra_index.is_empty() {
            let _ = writeln!(out, "extra_index = {}", list(&self.extra_index));
        }
        if !self.find_links.is_empty() {
            let links: Vec<String> = self
                .find_links
                .iter()
                .map(|l| if l.contains("://") { l.clone() } else { relative(Path::new(l), recipe_dir) })
                .collect();
            let _ = writeln!(out, "find_links = {}", list(&links));
        }
        self.render_build(&mut out);
        if let Some((v, cudnn)) = &self.cuda {
            let _ = writeln!(out, "\n[cuda]\nversion = {}", q(v));
            if let Some(c) = cudnn {
                let _ = writeln!(out, "cudnn = {}", q(c));
            }
        }
        let project = relative(&self.project, recipe_dir);
        let project = if project.is_empty() { ".".to_owned() } else { project };
        let _ = writeln!(
            out,
            "\n[[source]]\nname = {}\npath = {}\ndest = {}",
            q(&self.name),
            q(&project),
            q(&self.source_dest)
        );
        if self.project_wheel {
            out.push_str("install = \"wheel\"\n");
            if !self.project_extras.is_empty() {
                let _ = writeln!(out, "extras = {}", list(&self.project_extras));
            }
        }
        for (package, path) in &self.local_projects {
            let rel = relative(path, recipe_dir);
            let _ = writeln!(
                out,
                "\n[[source]]\nname = {}\npath = {}\ndest = {}\ninstall = \"wheel\"",
                q(package),
                q(if rel.is_empty() { "." } else { &rel }),
                q(&format!("/workspace/{package}"))
            );
        }
        if self.cuda.is_some() {
            out.push_str(
                "\n[host]\nmodules = [\"nvidia_uvm\"]\nmodules_deny = [\"nouveau\"]\ngpus = \">=1\"\n",
            );
        }
        if !self.untranslated.is_empty() {
            out.push_str("\n# Not translated (see `stackbuild init`'s report):\n");
            for u in &self.untranslated {
                let _ = writeln!(out, "#   {}: {} ({})", comment(&u.at), comment(&u.what), comment(&u.why));
            }
        }
        out
    }

    /// What was decided and what was not translated, for a person.
    pub fn report(&self) -> String {
        let mut out = String::from("Decided:\n");
        for d in &self.decisions {
            let _ = writeln!(out, "  - {d}");
        }
        if !self.untranslated.is_empty() {
            out.push_str("Not translated:\n");
            for u in &self.untranslated {
                let _ = writeln!(out, "  - {}: {}: {}", u.at, u.what, u.why);
            }
        }
        out
    }
}
