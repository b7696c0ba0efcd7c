//! The ClassAd language: parser, printer and evaluator with HTCondor's semantics
//! (UNDEFINED and ERROR values, three-valued logic, `MY.` / `TARGET.` / `other.`
//! scoping, case-insensitive `==` on strings, `=?=` / `=!=`, common built-ins).
//!
//! JDL `Requirements` and `Rank` and HTCondor `requirements` are evaluated with
//! [`ClassAd::matches`] and [`ClassAd::rank`] against a resource's ad.

mod ast;
mod builtins;
mod eval;
mod lexer;
mod parser;
mod value;

use std::fmt;

pub use ast::{BinOp, Expr, Kind, Scope, UnOp};
pub use eval::{eval, Env};
pub use value::Value;

use crate::diag::Diagnostic;
pub(crate) use parser::{Entry, Parser};

/// Parses one expression; positions in errors refer to `text`.
pub fn parse_expr(text: &str) -> Result<Expr, Diagnostic> {
    let mut p = Parser::new(text, 0, text.len())?;
    let e = p.expr()?;
    p.finish()?;
    Ok(e)
}

/// A ClassAd: named expressions, looked up without regard to case, kept in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassAd {
    attrs: Vec<(String, Expr)>,
}

impl ClassAd {
    /// Parses `[ a = 1; b = "x" ]`, or the same entries without brackets.
    pub fn parse(text: &str) -> Result<ClassAd, Diagnostic> {
        let mut p = Parser::new(text, 0, text.len())?;
        let bracketed = p.at_bracket();
        let entries = p.entries(bracketed)?;
        p.finish()?;
        let mut ad = ClassAd::default();
        for e in entries {
            ad.insert(&e.name, e.expr);
        }
        Ok(ad)
    }

    /// Sets `name` to `expr`, replacing an attribute of the same name in any case.
    pub fn insert(&mut self, name: &str, expr: Expr) {
        match self.attrs.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
            Some(slot) => slot.1 = expr,
            None => self.attrs.push((name.to_string(), expr)),
        }
    }

    /// Sets `name` to a literal value.
    pub fn insert_value(&mut self, name: &str, v: Value) {
        self.insert(name, Expr::new(Kind::Lit(v), 0, 0));
    }

    /// The expression bound to `name`, in any case.
    pub fn get(&self, name: &str) -> Option<&Expr> {
        self.attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, e)| e)
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.attrs.len()
    }

    /// True when the ad has no attributes.
    pub fn is_empty(&self) -> bool {
        self.attrs.is_empty()
    }

    /// Evaluates attribute `name` of this ad against `target` at time `now`.
    pub fn eval_attr(&self, name: &str, target: Option<&ClassAd>, now: i64) -> Value {
        match self.get(name) {
            Some(e) => eval(e, Env::new(Some(self), target, now)),
            None => Value::Undefined,
        }
    }

    /// Whether this ad's `Requirements` hold against `target` (only `true` counts).
    pub fn matches(&self, target: &ClassAd, now: i64) -> bool {
        self.eval_attr("Requirements", Some(target), now).is_true()
    }

    /// This ad's `Rank` of `target` as a number; anything but a number ranks 0.
    pub fn rank(&self, target: &ClassAd, now: i64) -> f64 {
        match self.eval_attr("Rank", Some(target), now) {
            Value::Bool(b) => f64::from(u8::from(b)),
            v => v.as_f64().unwrap_or(0.0),
        }
    }
}

impl ClassAd {
    /// The ad a job is matched with: its `Requirements` and `Rank` as written
    /// (`true` and `0` when absent). Errors point into the expression's text.
    pub fn for_job(job: &brokk_model::Job) -> Result<ClassAd, Diagnostic> {
        let mut ad = ClassAd::default();
        ad.insert(
            "Requirements",
            parse_expr(job.requirements.as_deref().unwrap_or("true"))?,
        );
        ad.insert("Rank", parse_expr(job.rank.as_deref().unwrap_or("0"))?);
        Ok(ad)
    }
}

impl fmt::Display for ClassAd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, (k, v)) in self.attrs.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{k} = {v}")?;
        }
        f.write_str("]")
    }
}

/// The top-level `&&` conjuncts of an expression, left to right.
pub fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match &e.kind {
        Kind::Binary(BinOp::And, a, b) => {
            let mut v = conjuncts(a);
            v.extend(conjuncts(b));
            v
        }
        _ => vec![e],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str) -> Value {
        eval(&parse_expr(s).unwrap(), Env::new(None, None, 0))
    }

    #[test]
    fn three_valued_logic() {
        assert_eq!(ev("undefined && false"), Value::Bool(false));
        assert_eq!(ev("true && undefined"), Value::Undefined);
        assert_eq!(ev("error && false"), Value::Error);
        assert_eq!(ev("false && error"), Value::Bool(false));
        assert_eq!(ev("undefined || true"), Value::Bool(true));
        assert_eq!(ev("undefined || error"), Value::Error);
        assert_eq!(ev("!undefined"), Value::Undefined);
    }

    #[test]
    fn comparisons_and_identity() {
        assert_eq!(ev("\"abc\" == \"ABC\""), Value::Bool(true));
        assert_eq!(ev("\"abc\" =?= \"ABC\""), Value::Bool(false));
        assert_eq!(ev("1 =?= 1.0"), Value::Bool(false));
        assert_eq!(ev("1 == 1.0"), Value::Bool(true));
        assert_eq!(ev("undefined == undefined"), Value::Undefined);
        assert_eq!(ev("undefined =?= undefined"), Value::Bool(true));
        assert_eq!(ev("1 < \"a\""), Value::Error);
    }

    #[test]
    fn arithmetic_follows_condor() {
        assert_eq!(ev("-7 / 2"), Value::Int(-3));
        assert_eq!(ev("-7 % 3"), Value::Int(-1));
        assert_eq!(ev("1 / 0"), Value::Error);
        assert_eq!(ev("true + 1"), Value::Int(2));
        assert_eq!(ev("9223372036854775807 + 1"), Value::Int(i64::MIN));
        assert_eq!(ev("strcat(\"a\", 2.5)"), Value::Str("a2.500000000000000E+00".into()));
        assert_eq!(ev("round(2.5)"), Value::Int(2));
        assert_eq!(ev("[a = 1; b = a + 1].b"), Value::Int(2));
    }

    #[test]
    fn scoping_between_job_and_resource() {
        let job = ClassAd::parse(
            "[ Memory = 10; Requirements = other.Memory >= MY.Memory && TARGET.Arch == \"x86_64\"; Rank = -other.Load ]",
        )
        .unwrap();
        let big = ClassAd::parse("[ Memory = 64; Arch = \"X86_64\"; Load = 2 ]").unwrap();
        let small = ClassAd::parse("[ Memory = 4; Arch = \"x86_64\" ]").unwrap();
        assert!(job.matches(&big, 0));
        assert!(!job.matches(&small, 0));
        assert_eq!(job.rank(&big, 0), -2.0);
        let cyclic = ClassAd::parse("[ a = b; b = a ]").unwrap();
        assert_eq!(cyclic.eval_attr("a", None, 0), Value::Error);
    }

    #[test]
    fn printing_reparses_to_the_same_value() {
        for s in [
            "1 + 2 * 3",
            "-(4) - -2",
            "{1, \"a\\\"b\", 2.5}[1]",
            "x =?= undefined || 'odd name' > 3",
            "[a = 1; b = a].b",
        ] {
            let e = parse_expr(s).unwrap();
            let again = parse_expr(&e.to_string()).unwrap();
            assert_eq!(
                eval(&e, Env::new(None, None, 0)),
                eval(&again, Env::new(None, None, 0)),
                "{s}"
            );
        }
    }
}
