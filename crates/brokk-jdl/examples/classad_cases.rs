//! Prints seeded random ClassAd expressions with Brokk's value for each, one per
//! line as `expression<TAB>value`, for `scripts/classad-crosscheck.sh` to compare
//! with HTCondor's own evaluator.
//!
//! Usage: `classad_cases [COUNT] [SEED]` (defaults 400 and 1).

use brokk_jdl::classad::{eval, parse_expr, Env, Value};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn leaf(r: &mut ChaCha8Rng) -> String {
    const STRS: &[&str] = &["\"a\"", "\"A\"", "\"abc\"", "\"ABC\"", "\"\"", "\"x y\""];
    const REALS: &[&str] = &["0.5", "2.5", "-1.25", "3.0", "1e3", "0.1"];
    match r.gen_range(0..10) {
        0..=2 => r.gen_range(-5..20).to_string(),
        3 => REALS[r.gen_range(0..REALS.len())].to_string(),
        4 | 5 => STRS[r.gen_range(0..STRS.len())].to_string(),
        6 => ["true", "false"][r.gen_range(0..2)].to_string(),
        7 => ["undefined", "error"][r.gen_range(0..2)].to_string(),
        8 => ["missing", "[a = 3; b = \"x\"].a", "[a = 3; b = \"x\"].b", "[a = 3].c"][r.gen_range(0..4)].to_string(),
        _ => format!(
            "{{{}, {}}}[{}]",
            r.gen_range(0..5),
            r.gen_range(0..5),
            r.gen_range(0..2)
        ),
    }
}

fn expr(r: &mut ChaCha8Rng, depth: u32) -> String {
    if depth == 0 || r.gen_range(0..4) == 0 {
        return leaf(r);
    }
    const BIN: &[&str] = &[
        "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "=?=", "=!=", "&&", "||", "&", "|", "^", "<<", ">>",
    ];
    const UN: &[&str] = &["-", "!", "~"];
    const FN1: &[&str] = &[
        "size",
        "toUpper",
        "toLower",
        "int",
        "real",
        "floor",
        "ceiling",
        "round",
        "isUndefined",
        "isError",
        "isString",
        "isInteger",
        "isReal",
        "isBoolean",
    ];
    let d = depth - 1;
    match r.gen_range(0..10) {
        0..=4 => format!("({} {} {})", expr(r, d), BIN[r.gen_range(0..BIN.len())], expr(r, d)),
        5 => format!("{}({})", UN[r.gen_range(0..UN.len())], expr(r, d)),
        6 => format!("({} ? {} : {})", expr(r, d), expr(r, d), expr(r, d)),
        7 => format!("{}({})", FN1[r.gen_range(0..FN1.len())], expr(r, d)),
        8 => match r.gen_range(0..5) {
            0 => format!("strcat({}, {})", expr(r, d), expr(r, d)),
            1 => format!("member({}, {{1, \"a\", 2.5, true}})", expr(r, d)),
            2 => format!(
                "substr(\"hello world\", {}, {})",
                r.gen_range(-4..8),
                r.gen_range(-3..6)
            ),
            3 => format!("strcmp({}, {})", expr(r, d), expr(r, d)),
            _ => format!("stricmp({}, {})", expr(r, d), expr(r, d)),
        },
        _ => format!("ifThenElse({}, {}, {})", expr(r, d), expr(r, d), expr(r, d)),
    }
}

/// A value in the cross-check's canonical text.
fn canon(v: &Value) -> String {
    match v {
        Value::Undefined => "undefined".into(),
        Value::Error => "error".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => format!("int:{i}"),
        Value::Real(x) => format!("real:{x:e}"),
        Value::Str(s) => format!("str:{}", serde_json::to_string(s).unwrap_or_default()),
        other => format!("other:{other}"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(400);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut printed = 0;
    while printed < count {
        let text = expr(&mut r, 4);
        let Ok(e) = parse_expr(&text) else {
            eprintln!("generated an expression Brokk cannot parse: {text}");
            std::process::exit(1);
        };
        println!("{text}\t{}", canon(&eval(&e, Env::new(None, None, 0))));
        printed += 1;
    }
}
