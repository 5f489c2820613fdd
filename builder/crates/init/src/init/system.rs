//! The base packages a resolved stack needs that no wheel carries: what the library audit of
//! real wheels found unresolved in the extension modules themselves (not in their Qt plugins,
//! which the audit lets pass), so that a recipe `init` writes builds without a round through
//! the audit's fix line. A table adds knowledge; the audit of every build still checks.

use std::collections::BTreeMap;

use super::Plan;

/// (package, Debian packages, what needs them). Measured: `stackbuild audit` of an image with
/// opencv-python 4.8.0.74 on bookworm: `cv2.abi3.so` and its bundled Qt 5 need `libGL.so.1`,
/// `libglib-2.0.so.0` and `libgthread-2.0.so.0` (the audit's fix line: libgl1, libglib2.0-0);
/// opencv-python's README says the same of its non-headless wheels ("opencv-python-headless
/// ... for server environments" without GUI dependencies).
const NEEDS: [(&str, &[&str], &str); 2] = [
    ("opencv-python", &["libgl1", "libglib2.0-0"], "cv2 links libGL.so.1 and GLib"),
    ("opencv-contrib-python", &["libgl1", "libglib2.0-0"], "cv2 links libGL.so.1 and GLib"),
];

/// A Debian package's name in `suite`: the 64-bit `time_t` transition renamed `GLib`'s library
/// package in trixie and noble (`libglib2.0-0t64`; Debian's "2038" transition).
fn in_suite(package: &str, suite: &str) -> String {
    if package == "libglib2.0-0"
        && matches!(suite, "trixie" | "forky" | "sid" | "noble" | "oracular" | "plucky")
    {
        return "libglib2.0-0t64".to_owned();
    }
    package.to_owned()
}

impl Plan {
    /// Adds to `[base] packages` what the resolved packages (`name -> version`) need of the
    /// base, and says why.
    pub fn system_packages(&mut self, resolved: &BTreeMap<String, String>) {
        for (name, packages, why) in NEEDS {
            let Some(version) = resolved.get(name) else { continue };
            let added: Vec<String> = packages
                .iter()
                .map(|p| in_suite(p, &self.distro.1))
                .filter(|p| !self.apt.contains(p))
                .collect();
            if added.is_empty() {
                continue;
            }
            self.decisions.push(format!(
                "[base] packages {}: {name} {version} needs them ({why}; the library audit of its wheel)",
                added.join(", ")
            ));
            self.apt.extend(added);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glib_is_renamed_in_the_suites_after_the_time_t_transition() {
        assert_eq!(super::in_suite("libglib2.0-0", "bookworm"), "libglib2.0-0");
        assert_eq!(super::in_suite("libglib2.0-0", "trixie"), "libglib2.0-0t64");
        assert_eq!(super::in_suite("libglib2.0-0", "noble"), "libglib2.0-0t64");
        assert_eq!(super::in_suite("libgl1", "noble"), "libgl1");
    }
}
