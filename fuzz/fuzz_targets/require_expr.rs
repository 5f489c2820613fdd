//! Requirement expressions come from image env and pod annotations: attacker-controlled.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stackhook::contract::require::{Expr, HostFacts};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(expr) = Expr::parse(text) {
        // What we print must parse back to the same expression.
        let again = Expr::parse(&expr.to_string()).expect("display output parses");
        assert_eq!(again, expr);
        let mut set = stackhook::contract::require::RequirementSet::default();
        set.entries.push(stackhook::contract::require::Requirement { source: "F".into(), expr, nvidia_order: None });
        let _ = set.evaluate(&HostFacts::default());
    }
});
