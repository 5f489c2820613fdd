//! The one writer of the JSON documents an image is made of (config, manifest, index,
//! `manifest.json`): compact, object keys in sorted byte order at every depth, no trailing newline.
//!
//! A document's bytes are its identity (its `sha256:` digest is what a manifest, an index and a
//! registry name it by), so they must be a function of its content only. Serde writes a struct's
//! fields in declaration order and a map in its iteration order; oci-spec's `annotations` and
//! `Labels` are `HashMap`s, whose order is seeded per process (Rust's `RandomState`), so writing
//! them directly gives different bytes, and different digests, from run to run. Every document is
//! therefore first turned into a `serde_json::Value` and its objects rebuilt in sorted key order
//! (which does not depend on whether `serde_json`'s `preserve_order` feature is on somewhere in the
//! dependency graph: then `Map` keeps insertion order, and the insertion order is sorted).

use serde::Serialize;
use serde_json::{Map, Value};

/// `value` as canonical JSON bytes.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&sorted(serde_json::to_value(value)?))
}

/// `value` with every object's keys in sorted order.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect::<Map<_, _>>())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::to_vec;

    #[test]
    fn keys_are_sorted_at_every_depth_and_output_is_compact() {
        let labels: HashMap<String, String> = (0..50).map(|i| (format!("k{i:02}"), i.to_string())).collect();
        let doc = serde_json::json!({ "z": [ { "b": 1, "a": labels } ], "a": "x" });
        let text = String::from_utf8(to_vec(&doc).unwrap()).unwrap();
        assert!(text.starts_with(r#"{"a":"x","z":[{"a":{"k00":"0","k01":"1","#), "{text}");
        assert!(!text.contains([' ', '\n']));
    }

    #[test]
    fn a_hash_map_writes_the_same_bytes_whatever_its_seed() {
        let build = || -> HashMap<String, u32> { (0..100).map(|i| (format!("label.{i}"), i)).collect() };
        let first = to_vec(&build()).unwrap();
        for _ in 0..20 {
            assert_eq!(to_vec(&build()).unwrap(), first);
        }
    }
}
