//! The built-in functions most used in JDL and HTCondor expressions, with
//! HTCondor's conversions (checked against its Python bindings by the cross-check).

use regex::RegexBuilder;

use super::ast::{BinOp, Expr};
use super::eval::{eval, identical, loosely_equal, truth, Env};
use super::value::{fmt_real_e, Value};

pub(crate) fn call(name: &str, args: &[Expr], env: Env<'_>) -> Value {
    let lower = name.to_ascii_lowercase();
    // ifThenElse evaluates only the branch it takes.
    if lower == "ifthenelse" {
        if args.len() != 3 {
            return Value::Error;
        }
        return match truth(eval(&args[0], env)) {
            Value::Bool(true) => eval(&args[1], env),
            Value::Bool(false) => eval(&args[2], env),
            other => other,
        };
    }
    let v: Vec<Value> = args.iter().map(|a| eval(a, env)).collect();
    match (lower.as_str(), v.as_slice()) {
        ("isundefined", [a]) => Value::Bool(matches!(a, Value::Undefined)),
        ("iserror", [a]) => Value::Bool(matches!(a, Value::Error)),
        ("isstring", [a]) => Value::Bool(matches!(a, Value::Str(_))),
        ("isinteger", [a]) => Value::Bool(matches!(a, Value::Int(_))),
        ("isreal", [a]) => Value::Bool(matches!(a, Value::Real(_))),
        ("isboolean", [a]) => Value::Bool(matches!(a, Value::Bool(_))),
        ("islist", [a]) => Value::Bool(matches!(a, Value::List(_))),
        ("isclassad", [a]) => Value::Bool(matches!(a, Value::Ad(_))),
        ("int", [a]) => to_int(a),
        ("real", [a]) => to_real(a),
        ("string", [a]) => to_string(a).map_or_else(|e| e, Value::Str),
        ("bool", [a]) => match a {
            Value::Str(s) if s.eq_ignore_ascii_case("true") => Value::Bool(true),
            Value::Str(s) if s.eq_ignore_ascii_case("false") => Value::Bool(false),
            Value::Str(_) => Value::Error,
            other => truth(other.clone()),
        },
        ("floor", [a]) => rounding(a, f64::floor),
        ("ceiling", [a]) => rounding(a, f64::ceil),
        ("round", [a]) => rounding(a, f64::round_ties_even),
        ("pow", [a, b]) => pow(a, b),
        ("strcat", all) => {
            let mut out = String::new();
            for a in all {
                match to_string(a) {
                    Ok(s) => out.push_str(&s),
                    Err(e) => return e,
                }
            }
            Value::Str(out)
        }
        ("join", [sep, rest @ ..]) => {
            let items: Vec<Value> = match rest {
                [Value::List(items)] => items.clone(),
                other => other.to_vec(),
            };
            let Ok(sep) = to_string(sep) else {
                return Value::Error;
            };
            let mut parts = Vec::new();
            for i in &items {
                match to_string(i) {
                    Ok(s) => parts.push(s),
                    Err(e) => return e,
                }
            }
            Value::Str(parts.join(&sep))
        }
        ("substr", [s, off, rest @ ..]) if rest.len() <= 1 => substr(s, off, rest.first()),
        ("strcmp", [a, b]) => strcmp(a, b, false),
        ("stricmp", [a, b]) => strcmp(a, b, true),
        ("toupper", [a]) => to_string(a).map_or_else(|e| e, |s| Value::Str(s.to_uppercase())),
        ("tolower", [a]) => to_string(a).map_or_else(|e| e, |s| Value::Str(s.to_lowercase())),
        ("size" | "length", [a]) => match a {
            Value::Str(s) => Value::Int(s.len() as i64),
            Value::List(l) => Value::Int(l.len() as i64),
            Value::Ad(ad) => Value::Int(ad.len() as i64),
            Value::Undefined => Value::Undefined,
            _ => Value::Error,
        },
        ("member", [x, list]) => member(x, list, false),
        ("identicalmember", [x, list]) => member(x, list, true),
        ("regexp", [p, t, rest @ ..]) if rest.len() <= 1 => regexp(p, t, rest.first()),
        ("stringlistmember", [x, l, rest @ ..]) if rest.len() <= 1 => string_list(l, rest.first(), |items| match x {
            Value::Str(x) => Value::Bool(items.iter().any(|i| i == x)),
            _ => Value::Error,
        }),
        ("stringlistimember", [x, l, rest @ ..]) if rest.len() <= 1 => string_list(l, rest.first(), |items| match x {
            Value::Str(x) => Value::Bool(items.iter().any(|i| i.eq_ignore_ascii_case(x))),
            _ => Value::Error,
        }),
        ("stringlistsize", [l, rest @ ..]) if rest.len() <= 1 => {
            string_list(l, rest.first(), |items| Value::Int(items.len() as i64))
        }
        ("split", [s, rest @ ..]) if rest.len() <= 1 => string_list(s, rest.first(), |items| {
            Value::List(items.into_iter().map(Value::Str).collect())
        }),
        ("min" | "max" | "sum" | "avg", [list]) => aggregate(&lower, list),
        ("anycompare" | "allcompare", [op, list, x]) => compare_all(lower == "anycompare", op, list, x),
        ("time", []) => Value::Int(env.now),
        _ => Value::Error,
    }
}

fn to_int(a: &Value) -> Value {
    match a {
        Value::Int(i) => Value::Int(*i),
        Value::Bool(b) => Value::Int(i64::from(*b)),
        Value::Real(r) => Value::Int(real_to_int(r.trunc())),
        Value::Str(s) => {
            let t = s.trim();
            match t.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => t
                    .parse::<f64>()
                    .map_or(Value::Error, |r| Value::Int(real_to_int(r.trunc()))),
            }
        }
        Value::Undefined => Value::Undefined,
        _ => Value::Error,
    }
}

/// C's conversion on x86: out-of-range values become the minimum integer.
fn real_to_int(r: f64) -> i64 {
    if r.is_finite() && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&r) {
        r as i64
    } else {
        i64::MIN
    }
}

fn to_real(a: &Value) -> Value {
    match a {
        Value::Int(i) => Value::Real(*i as f64),
        Value::Bool(b) => Value::Real(f64::from(u8::from(*b))),
        Value::Real(r) => Value::Real(*r),
        Value::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "inf" => Value::Real(f64::INFINITY),
            "-inf" => Value::Real(f64::NEG_INFINITY),
            "nan" => Value::Real(f64::NAN),
            t => t.parse::<f64>().map_or(Value::Error, Value::Real),
        },
        Value::Undefined => Value::Undefined,
        _ => Value::Error,
    }
}

/// The string form used by `string()` and `strcat()`; UNDEFINED and ERROR pass through.
fn to_string(a: &Value) -> Result<String, Value> {
    match a {
        Value::Str(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Real(r) => Ok(fmt_real_e(*r)),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Undefined => Err(Value::Undefined),
        Value::Error => Err(Value::Error),
        other => Ok(other.to_string()),
    }
}

fn rounding(a: &Value, f: fn(f64) -> f64) -> Value {
    match a {
        Value::Int(i) => Value::Int(*i),
        Value::Bool(b) => Value::Int(i64::from(*b)),
        Value::Real(r) => Value::Int(real_to_int(f(*r))),
        Value::Str(_) => match to_real(a) {
            Value::Real(r) => Value::Int(real_to_int(f(r))),
            other => other,
        },
        _ => Value::Error,
    }
}

fn pow(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Error, _) | (_, Value::Error) => Value::Error,
        (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
        (Value::Int(x), Value::Int(y)) if *y >= 0 => Value::Int(wrapping_pow(*x, *y as u64)),
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => Value::Real(x.powf(y)),
            _ => Value::Error,
        },
    }
}

fn substr(s: &Value, off: &Value, len: Option<&Value>) -> Value {
    let (Value::Str(s), Value::Int(off)) = (s, off) else {
        return if [Some(s), Some(off), len]
            .iter()
            .flatten()
            .any(|v| matches!(v, Value::Undefined))
        {
            Value::Undefined
        } else {
            Value::Error
        };
    };
    let n = s.len() as i64;
    let start = if *off < 0 { (n + off).max(0) } else { (*off).min(n) };
    let end = match len {
        None => n,
        Some(Value::Int(l)) if *l < 0 => (n + l).max(start),
        Some(Value::Int(l)) => start.saturating_add(*l).min(n),
        Some(Value::Undefined) => return Value::Undefined,
        Some(_) => return Value::Error,
    };
    let bytes = &s.as_bytes()[start as usize..end.max(start) as usize];
    Value::Str(String::from_utf8_lossy(bytes).into_owned())
}

fn strcmp(a: &Value, b: &Value, fold: bool) -> Value {
    // HTCondor lets UNDEFINED win over ERROR here.
    if matches!(a, Value::Undefined) || matches!(b, Value::Undefined) {
        return Value::Undefined;
    }
    match (to_string(a), to_string(b)) {
        (Err(e), _) | (_, Err(e)) => e,
        (Ok(x), Ok(y)) => {
            let o = if fold {
                x.to_lowercase().cmp(&y.to_lowercase())
            } else {
                x.cmp(&y)
            };
            Value::Int(o as i64)
        }
    }
}

fn member(x: &Value, list: &Value, strict: bool) -> Value {
    match (x, list) {
        (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
        (Value::Error, _) | (_, Value::Error) => Value::Error,
        (x, Value::List(items)) => Value::Bool(items.iter().any(|i| {
            if strict {
                identical(x, i)
            } else {
                loosely_equal(x, i).is_true()
            }
        })),
        _ => Value::Error,
    }
}

fn regexp(p: &Value, t: &Value, opts: Option<&Value>) -> Value {
    let (Value::Str(p), Value::Str(t)) = (p, t) else {
        return Value::Error;
    };
    let opts = match opts {
        None => String::new(),
        Some(Value::Str(o)) => o.to_ascii_lowercase(),
        Some(_) => return Value::Error,
    };
    match RegexBuilder::new(p)
        .case_insensitive(opts.contains('i'))
        .multi_line(opts.contains('m'))
        .dot_matches_new_line(opts.contains('s'))
        .ignore_whitespace(opts.contains('x'))
        .size_limit(1 << 20)
        .build()
    {
        Ok(re) => Value::Bool(re.is_match(t)),
        Err(_) => Value::Error,
    }
}

fn string_list(l: &Value, delims: Option<&Value>, f: impl FnOnce(Vec<String>) -> Value) -> Value {
    let Value::Str(l) = l else {
        return if matches!(l, Value::Undefined) {
            Value::Undefined
        } else {
            Value::Error
        };
    };
    let delims: Vec<char> = match delims {
        None => vec![',', ' ', '\t'],
        Some(Value::Str(d)) => d.chars().collect(),
        Some(_) => return Value::Error,
    };
    f(l.split(|c| delims.contains(&c))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

fn aggregate(which: &str, list: &Value) -> Value {
    let Value::List(items) = list else {
        return if matches!(list, Value::Undefined) {
            Value::Undefined
        } else {
            Value::Error
        };
    };
    let mut any_real = which == "avg";
    let mut ints: Vec<i64> = Vec::new();
    let mut reals: Vec<f64> = Vec::new();
    for i in items {
        match i {
            Value::Int(n) => {
                ints.push(*n);
                reals.push(*n as f64);
            }
            Value::Real(r) => {
                any_real = true;
                reals.push(*r);
            }
            Value::Undefined => {}
            _ => return Value::Error,
        }
    }
    if reals.is_empty() {
        return match which {
            "sum" | "avg" => Value::Int(0),
            _ => Value::Undefined,
        };
    }
    if !any_real {
        return Value::Int(match which {
            "min" => ints.iter().copied().min().unwrap_or(0),
            "max" => ints.iter().copied().max().unwrap_or(0),
            _ => ints.iter().fold(0i64, |a, b| a.wrapping_add(*b)),
        });
    }
    let r = match which {
        "min" => reals.iter().copied().fold(f64::INFINITY, f64::min),
        "max" => reals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "sum" => reals.iter().sum(),
        _ => reals.iter().sum::<f64>() / reals.len() as f64,
    };
    Value::Real(r)
}

fn compare_all(any: bool, op: &Value, list: &Value, x: &Value) -> Value {
    let (Value::Str(op), Value::List(items)) = (op, list) else {
        return Value::Error;
    };
    let op = match op.as_str() {
        "<" => BinOp::Lt,
        "<=" => BinOp::Le,
        ">" => BinOp::Gt,
        ">=" => BinOp::Ge,
        "==" => BinOp::Eq,
        "!=" => BinOp::Ne,
        "=?=" | "is" => BinOp::Is,
        "=!=" | "isnt" => BinOp::Isnt,
        _ => return Value::Error,
    };
    let test = |i: &Value| -> bool {
        match op {
            BinOp::Is => identical(i, x),
            BinOp::Isnt => !identical(i, x),
            _ => super::eval::compare_values(op, i, x).is_true(),
        }
    };
    Value::Bool(if any {
        items.iter().any(test)
    } else {
        items.iter().all(test)
    })
}

fn wrapping_pow(mut base: i64, mut exp: u64) -> i64 {
    let mut acc: i64 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}
