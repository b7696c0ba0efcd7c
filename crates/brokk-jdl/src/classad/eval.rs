//! Evaluation with HTCondor's semantics: UNDEFINED and ERROR propagate, `&&` and
//! `||` are three-valued and non-strict, `==` on strings ignores case while `=?=`
//! does not, booleans act as 0/1 in arithmetic and numbers as booleans in logic.

use std::rc::Rc;

use super::ast::{BinOp, Expr, Kind, Scope, UnOp};
use super::builtins;
use super::value::Value;
use super::ClassAd;

/// Attribute references deeper than this (usually a cycle) evaluate to ERROR.
const MAX_DEPTH: usize = 64;

/// Nested evaluation calls one evaluation may make, summed over the
/// expressions its references reach (each costs its height): a reference
/// that would go beyond evaluates to ERROR instead of exhausting the stack.
const MAX_FRAMES: usize = 1024;

/// Where attribute references resolve and what time it is.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// The ad holding the expression (`MY`).
    pub my: Option<&'a ClassAd>,
    /// The ad it is matched against (`TARGET`, `other`).
    pub target: Option<&'a ClassAd>,
    /// The enclosing ad of a nested record.
    pub parent: Option<&'a ClassAd>,
    /// Seconds since the epoch for `time()`; from the caller's clock, never read here.
    pub now: i64,
    pub(crate) depth: usize,
    /// Frames the references followed so far may take: see [`MAX_FRAMES`].
    pub(crate) frames: usize,
}

impl<'a> Env<'a> {
    /// An environment for matching `my` against `target` at time `now`.
    pub fn new(my: Option<&'a ClassAd>, target: Option<&'a ClassAd>, now: i64) -> Self {
        Env {
            my,
            target,
            parent: None,
            now,
            depth: 0,
            frames: 0,
        }
    }

    /// The environment for evaluating `x` one reference deeper, if the
    /// reference depth and the frame budget allow it.
    fn deeper(self, x: &Expr) -> Option<Self> {
        (self.depth < MAX_DEPTH && self.frames + x.height <= MAX_FRAMES).then_some(Env {
            depth: self.depth + 1,
            frames: self.frames + x.height,
            ..self
        })
    }
}

/// Evaluates `e` in `env`.
pub fn eval(e: &Expr, env: Env<'_>) -> Value {
    match &e.kind {
        Kind::Lit(v) => v.clone(),
        Kind::Attr(scope, name) => lookup(*scope, name, env),
        Kind::Unary(op, a) => unary(*op, eval(a, env)),
        Kind::Binary(BinOp::And, a, b) => and(eval(a, env), || eval(b, env)),
        Kind::Binary(BinOp::Or, a, b) => or(eval(a, env), || eval(b, env)),
        Kind::Binary(op, a, b) => binary(*op, eval(a, env), eval(b, env)),
        Kind::Cond(c, a, b) => match truth(eval(c, env)) {
            Value::Bool(true) => eval(a, env),
            Value::Bool(false) => eval(b, env),
            other => other,
        },
        Kind::Call(name, args) => builtins::call(name, args, env),
        Kind::List(items) => Value::List(items.iter().map(|i| eval(i, env)).collect()),
        Kind::Record(fields) => {
            let mut ad = ClassAd::default();
            for (k, v) in fields {
                ad.insert(k, v.clone());
            }
            Value::Ad(Rc::new(ad))
        }
        Kind::Select(base, name) => match eval(base, env) {
            Value::Ad(ad) => match ad.get(name) {
                Some(x) => match env.deeper(x) {
                    Some(inner) => eval(
                        x,
                        Env {
                            my: Some(&ad),
                            parent: env.my,
                            ..inner
                        },
                    ),
                    None => Value::Error,
                },
                None => Value::Undefined,
            },
            Value::Undefined => Value::Undefined,
            Value::List(items) => Value::List(
                items
                    .into_iter()
                    .map(|v| match v {
                        Value::Ad(ad) => ad
                            .get(name)
                            .map_or(Value::Undefined, |x| eval(x, Env { my: Some(&ad), ..env })),
                        _ => Value::Error,
                    })
                    .collect(),
            ),
            _ => Value::Error,
        },
        Kind::Index(base, idx) => match (eval(base, env), eval(idx, env)) {
            (Value::Error, _) | (_, Value::Error) => Value::Error,
            (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
            (Value::List(items), Value::Int(i)) => usize::try_from(i)
                .ok()
                .and_then(|i| items.get(i).cloned())
                .unwrap_or(Value::Error),
            (Value::Ad(ad), Value::Str(name)) => match ad.get(&name) {
                Some(x) => eval(x, Env { my: Some(&ad), ..env }),
                None => Value::Undefined,
            },
            _ => Value::Error,
        },
    }
}

fn lookup(scope: Option<Scope>, name: &str, env: Env<'_>) -> Value {
    let in_ad = |ad: &ClassAd, other: Option<&ClassAd>| {
        ad.get(name).map(|x| match env.deeper(x) {
            Some(inner) => eval(
                x,
                Env {
                    my: Some(ad),
                    target: other,
                    ..inner
                },
            ),
            None => Value::Error,
        })
    };
    let found = match scope {
        Some(Scope::My) => env.my.and_then(|ad| in_ad(ad, env.target)),
        Some(Scope::Target) => env.target.and_then(|ad| in_ad(ad, env.my)),
        Some(Scope::Parent) => env.parent.and_then(|ad| in_ad(ad, env.target)),
        // Unscoped: this ad, then the enclosing one, then the match candidate, as in matchmaking.
        None => env
            .my
            .and_then(|ad| in_ad(ad, env.target))
            .or_else(|| env.parent.and_then(|ad| in_ad(ad, env.target)))
            .or_else(|| env.target.and_then(|ad| in_ad(ad, env.my))),
    };
    found.unwrap_or(Value::Undefined)
}

/// A value in a logical context: booleans, numbers (non-zero is true), UNDEFINED or ERROR.
pub(crate) fn truth(v: Value) -> Value {
    match v {
        Value::Bool(_) | Value::Undefined | Value::Error => v,
        Value::Int(i) => Value::Bool(i != 0),
        Value::Real(r) => Value::Bool(r != 0.0),
        _ => Value::Error,
    }
}

fn and(a: Value, b: impl FnOnce() -> Value) -> Value {
    match truth(a) {
        Value::Bool(false) => Value::Bool(false),
        Value::Error => Value::Error,
        Value::Bool(true) => truth(b()),
        _ => match truth(b()) {
            Value::Bool(false) => Value::Bool(false),
            Value::Error => Value::Error,
            _ => Value::Undefined,
        },
    }
}

fn or(a: Value, b: impl FnOnce() -> Value) -> Value {
    match truth(a) {
        Value::Bool(true) => Value::Bool(true),
        Value::Error => Value::Error,
        Value::Bool(false) => truth(b()),
        _ => match truth(b()) {
            Value::Bool(true) => Value::Bool(true),
            Value::Error => Value::Error,
            _ => Value::Undefined,
        },
    }
}

fn unary(op: UnOp, v: Value) -> Value {
    match (op, v) {
        (_, Value::Error) => Value::Error,
        (_, Value::Undefined) => Value::Undefined,
        (UnOp::Not, v) => match truth(v) {
            Value::Bool(b) => Value::Bool(!b),
            other => other,
        },
        (UnOp::Neg, Value::Int(i)) => Value::Int(i.wrapping_neg()),
        (UnOp::Neg, Value::Real(r)) => Value::Real(-r),
        (UnOp::Plus, v @ (Value::Int(_) | Value::Real(_))) => v,
        (UnOp::BitNot, Value::Int(i)) => Value::Int(!i),
        _ => Value::Error,
    }
}

/// A number for arithmetic: booleans count as 0 and 1.
enum Num {
    I(i64),
    R(f64),
}

fn num(v: &Value) -> Option<Num> {
    match v {
        Value::Int(i) => Some(Num::I(*i)),
        Value::Real(r) => Some(Num::R(*r)),
        Value::Bool(b) => Some(Num::I(i64::from(*b))),
        _ => None,
    }
}

fn real(r: f64) -> Value {
    if r.is_finite() {
        Value::Real(r)
    } else {
        Value::Error
    }
}

fn binary(op: BinOp, a: Value, b: Value) -> Value {
    if matches!(op, BinOp::Is | BinOp::Isnt) {
        return Value::Bool(identical(&a, &b) == (op == BinOp::Is));
    }
    if matches!(a, Value::Error) || matches!(b, Value::Error) {
        return Value::Error;
    }
    if matches!(a, Value::Undefined) || matches!(b, Value::Undefined) {
        return Value::Undefined;
    }
    match op {
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => compare(op, &a, &b),
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod => arith(op, &a, &b),
        _ => match (&a, &b) {
            (Value::Int(x), Value::Int(y)) => Value::Int(match op {
                BinOp::BitAnd => x & y,
                BinOp::BitOr => x | y,
                BinOp::BitXor => x ^ y,
                BinOp::Shl => x.wrapping_shl(*y as u32),
                BinOp::Shr => x.wrapping_shr(*y as u32),
                _ => ((*x as u64).wrapping_shr(*y as u32)) as i64,
            }),
            _ => Value::Error,
        },
    }
}

fn arith(op: BinOp, a: &Value, b: &Value) -> Value {
    match (num(a), num(b)) {
        (Some(Num::I(x)), Some(Num::I(y))) => match op {
            BinOp::Add => Value::Int(x.wrapping_add(y)),
            BinOp::Sub => Value::Int(x.wrapping_sub(y)),
            BinOp::Mul => Value::Int(x.wrapping_mul(y)),
            BinOp::Div if y == 0 => Value::Error,
            BinOp::Div => Value::Int(x.wrapping_div(y)),
            _ if y == 0 => Value::Error,
            _ => Value::Int(x.wrapping_rem(y)),
        },
        (Some(x), Some(y)) => {
            let f = |n: Num| match n {
                Num::I(i) => i as f64,
                Num::R(r) => r,
            };
            let (x, y) = (f(x), f(y));
            match op {
                BinOp::Add => real(x + y),
                BinOp::Sub => real(x - y),
                BinOp::Mul => real(x * y),
                BinOp::Div if y == 0.0 => Value::Error,
                BinOp::Div => real(x / y),
                _ => Value::Error,
            }
        }
        _ => Value::Error,
    }
}

fn compare(op: BinOp, a: &Value, b: &Value) -> Value {
    let ord = match (a, b) {
        (Value::Str(x), Value::Str(y)) => x.to_lowercase().cmp(&y.to_lowercase()),
        _ => match (num(a), num(b)) {
            (Some(Num::I(x)), Some(Num::I(y))) => x.cmp(&y),
            (Some(x), Some(y)) => {
                let f = |n: Num| match n {
                    Num::I(i) => i as f64,
                    Num::R(r) => r,
                };
                match f(x).partial_cmp(&f(y)) {
                    Some(o) => o,
                    None => return Value::Bool(op == BinOp::Ne),
                }
            }
            _ => return Value::Error,
        },
    };
    Value::Bool(match op {
        BinOp::Eq => ord.is_eq(),
        BinOp::Ne => ord.is_ne(),
        BinOp::Lt => ord.is_lt(),
        BinOp::Le => ord.is_le(),
        BinOp::Gt => ord.is_gt(),
        _ => ord.is_ge(),
    })
}

/// `=?=`: same type and value, strings compared with case.
pub(crate) fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Real(x), Value::Real(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Value::List(x), Value::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q)),
        (Value::Ad(x), Value::Ad(y)) => Rc::ptr_eq(x, y),
        _ => a == b,
    }
}

/// Loose equality used by `member`: `==` semantics, false on type mismatch.
pub(crate) fn loosely_equal(a: &Value, b: &Value) -> Value {
    compare_values(BinOp::Eq, a, b)
}

/// A comparison operator applied to two values, with UNDEFINED and ERROR propagated.
pub(crate) fn compare_values(op: BinOp, a: &Value, b: &Value) -> Value {
    binary(op, a.clone(), b.clone())
}
