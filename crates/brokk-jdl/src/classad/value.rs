//! ClassAd values, including the UNDEFINED and ERROR values.

use std::fmt;
use std::rc::Rc;

use super::ClassAd;

/// The result of evaluating a ClassAd expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An attribute that does not exist, or an operation on one.
    Undefined,
    /// A type error or other failure.
    Error,
    /// `true` / `false`.
    Bool(bool),
    /// A 64-bit integer.
    Int(i64),
    /// A double.
    Real(f64),
    /// A string.
    Str(String),
    /// A list of values.
    List(Vec<Value>),
    /// A nested ad.
    Ad(Rc<ClassAd>),
}

impl Value {
    /// The type name used in messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Undefined => "undefined",
            Value::Error => "error",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Real(_) => "real",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Ad(_) => "classad",
        }
    }

    /// The value as a number, when it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Real(r) => Some(*r),
            _ => None,
        }
    }

    /// True only for `Bool(true)`.
    pub fn is_true(&self) -> bool {
        matches!(self, Value::Bool(true))
    }
}

/// Real numbers print with a decimal point or exponent so that they read back as reals.
pub(crate) fn fmt_real(r: f64) -> String {
    if r.is_nan() {
        "real(\"NaN\")".into()
    } else if r.is_infinite() {
        if r > 0.0 {
            "real(\"INF\")".into()
        } else {
            "real(\"-INF\")".into()
        }
    } else {
        let s = format!("{r:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

/// The `%.15E` form HTCondor uses when it turns a real into a string.
pub(crate) fn fmt_real_e(r: f64) -> String {
    if !r.is_finite() {
        return if r.is_nan() {
            "nan".into()
        } else if r > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let s = format!("{r:.15E}");
    match s.split_once('E') {
        Some((m, e)) => {
            let e: i32 = e.parse().unwrap_or(0);
            format!("{m}E{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        }
        None => s,
    }
}

/// Writes a string literal with escapes.
pub(crate) fn fmt_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Undefined => f.write_str("undefined"),
            Value::Error => f.write_str("error"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) if *i == i64::MIN => f.write_str("(-9223372036854775807 - 1)"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Real(r) => f.write_str(&fmt_real(*r)),
            Value::Str(s) => f.write_str(&fmt_str(s)),
            Value::List(items) => {
                f.write_str("{")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("}")
            }
            Value::Ad(ad) => write!(f, "{ad}"),
        }
    }
}
