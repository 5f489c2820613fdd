//! The check every key struct's test runs: each of its inputs is part of its key.
//!
//! [`assert_every_input_changes_key`] turns a realistic instance of a key struct into a
//! `serde_json::Value`, checks that its fields are the ones the test lists (so a field added to
//! the struct is a field its test names, and a reviewer sees it), then changes one leaf at a time
//! (a string gets a character more, a number 1 more, a bool flips, an array loses or gains an
//! element, a value becomes `null` and `null` a value) and checks that each change gives another
//! [`LayerKey`], computed by the same [`LayerKey::of`] the build calls. Only with the `key-test`
//! feature (the crates' dev-dependencies turn it on) or in this crate's own tests.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::cache::LayerKey;

/// Asserts that `inputs`, a key struct of `kind`, serializes to an object whose fields are
/// exactly `fields` (in any order; at least one), and that changing any one of its values, at
/// any depth, changes its key. Returns the paths changed (`scheme.purelib`, `members[0].sha256`),
/// for a test that wants to name some.
///
/// # Panics
///
/// When a field is missing from `fields` or not in the struct, or a change leaves the key as it
/// was.
pub fn assert_every_input_changes_key<T: Serialize + ?Sized>(
    kind: &str,
    inputs: &T,
    fields: &[&str],
) -> Vec<String> {
    let value = serde_json::to_value(inputs).expect("a key's inputs serialize as JSON");
    let original = LayerKey::of(kind, inputs);
    assert_eq!(LayerKey::of(kind, &value), original, "{kind}: the struct and its JSON value give one key");
    assert!(!fields.is_empty(), "{kind}: a key has inputs");
    let Value::Object(map) = &value else { panic!("{kind}: a key's inputs are a struct, got {value}") };
    let mut have: Vec<&str> = map.keys().map(String::as_str).collect();
    let mut want: Vec<&str> = fields.to_vec();
    have.sort_unstable();
    want.sort_unstable();
    assert_eq!(have, want, "{kind}: the struct's fields are the ones its test lists");

    let mut changed = Vec::new();
    let mut paths = Vec::new();
    leaves(&value, &mut Vec::new(), &mut paths);
    for path in paths {
        for mutated in mutations(at(&value, &path)) {
            let mut copy = value.clone();
            *at_mut(&mut copy, &path) = mutated.clone();
            let name = show(&path);
            assert_ne!(
                LayerKey::of(kind, &copy),
                original,
                "{kind}: {name} changed to {mutated} and the key did not change"
            );
            if changed.last() != Some(&name) {
                changed.push(name);
            }
        }
    }
    assert!(!changed.is_empty(), "{kind}: nothing was changed");
    changed
}

/// One step into a JSON value.
#[derive(Clone)]
enum Step {
    Field(String),
    Index(usize),
}

/// Every node below the root, parents before children.
fn leaves(value: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    if !path.is_empty() {
        out.push(path.clone());
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                path.push(Step::Field(k.clone()));
                leaves(v, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Step::Index(i));
                leaves(v, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The changes tried at a node: the leaf mutations, an array's or object's own, and `null` for
/// anything else (an `Option` turned off, a part dropped).
fn mutations(value: &Value) -> Vec<Value> {
    let mut out = match value {
        Value::Null => vec![Value::String("x".into()), Value::Bool(false)],
        Value::Bool(b) => vec![Value::Bool(!b)],
        Value::Number(n) => vec![if let Some(u) = n.as_u64() {
            Value::from(u.wrapping_add(1))
        } else if let Some(i) = n.as_i64() {
            Value::from(i.wrapping_add(1))
        } else {
            Value::from(n.as_f64().unwrap_or_default() + 1.0)
        }],
        Value::String(s) => vec![Value::String(format!("{s}x"))],
        Value::Array(items) => {
            let mut grown = items.clone();
            grown.push(items.first().cloned().unwrap_or(Value::Null));
            let mut v = vec![Value::Array(grown)];
            if !items.is_empty() {
                let mut shrunk = items.clone();
                shrunk.pop();
                v.push(Value::Array(shrunk));
                v.push(Value::Array(Vec::new()));
            }
            v
        }
        Value::Object(map) => {
            let mut grown = map.clone();
            grown.insert("\u{1}added".into(), Value::Null);
            vec![Value::Object(grown)]
        }
    };
    if !value.is_null() {
        out.push(Value::Null);
    }
    out
}

fn at<'a>(value: &'a Value, path: &[Step]) -> &'a Value {
    path.iter().fold(value, |v, step| match step {
        Step::Field(k) => &v[k.as_str()],
        Step::Index(i) => &v[*i],
    })
}

fn at_mut<'a>(value: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(value, |v, step| match step {
        Step::Field(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

/// `members[0].sha256`.
fn show(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Field(k) if s.is_empty() => s.push_str(k),
            Step::Field(k) => {
                s.push('.');
                s.push_str(k);
            }
            Step::Index(i) => {
                let _ = write!(s, "[{i}]");
            }
        }
    }
    s
}
