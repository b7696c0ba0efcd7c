//! Lifting simple conjuncts out of a requirements expression into model fields,
//! and putting them back, for the ClassAd-based languages (JDL, HTCondor).

use crate::classad::{conjuncts, BinOp, Expr, Kind, Scope, Value};

/// One top-level conjunct recognised as `attr op literal` or `member(literal, attr)`.
pub(crate) enum Atom<'e> {
    /// `[TARGET.]attr op value`, with the attribute name lower-cased.
    Cmp(String, BinOp, &'e Value),
    /// `member(value, [TARGET.]attr)`.
    Member(&'e Value, String),
}

/// Classifies a conjunct; `unscoped` says whether a bare attribute counts as the target's.
pub(crate) fn atom(e: &Expr, unscoped: bool) -> Option<Atom<'_>> {
    let target_attr = |e: &Expr| match &e.kind {
        Kind::Attr(Some(Scope::Target), n) => Some(n.to_ascii_lowercase()),
        Kind::Attr(None, n) if unscoped => Some(n.to_ascii_lowercase()),
        _ => None,
    };
    match &e.kind {
        Kind::Binary(op, a, b) => match (&a.kind, &b.kind) {
            (_, Kind::Lit(v)) => Some(Atom::Cmp(target_attr(a)?, *op, v)),
            _ => None,
        },
        Kind::Call(name, args) if name.eq_ignore_ascii_case("member") && args.len() == 2 => match &args[0].kind {
            Kind::Lit(v) => Some(Atom::Member(v, target_attr(&args[1])?)),
            _ => None,
        },
        _ => None,
    }
}

/// Splits `expr` (parsed from `src`) into conjuncts that `take` consumes and the
/// source text of the rest, joined by ` && `, or `None` when nothing is left.
pub(crate) fn lift(src: &str, expr: &Expr, mut take: impl FnMut(&Expr) -> bool) -> Option<String> {
    let rest: Vec<&str> = conjuncts(expr)
        .into_iter()
        .filter(|c| !take(c))
        .map(|c| src.get(c.start..c.end).unwrap_or(""))
        .collect();
    match rest.as_slice() {
        [] => None,
        [one] => Some(strip_parens(one).to_string()),
        many => Some(many.join(" && ")),
    }
}

/// Removes parentheses that wrap the whole text.
fn strip_parens(s: &str) -> &str {
    let t = s.trim();
    if t.starts_with('(') && t.ends_with(')') {
        let inner = &t[1..t.len() - 1];
        // Only when the first `(` closes at the very end.
        let mut depth = 0i32;
        let mut in_str = false;
        let mut esc = false;
        for c in inner.chars() {
            if in_str {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_str = true,
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth < 0 {
                        return t;
                    }
                }
                _ => {}
            }
        }
        return strip_parens(inner);
    }
    t
}

/// Joins generated conjuncts with the user's requirements, parenthesising the
/// latter unless it is already a conjunction or a simple term.
pub(crate) fn combine(generated: &[String], user: Option<&str>) -> Option<String> {
    let mut parts: Vec<String> = generated.to_vec();
    if let Some(u) = user {
        let simple = crate::classad::parse_expr(u)
            .map(|e| !matches!(e.kind, Kind::Binary(BinOp::Or, ..) | Kind::Cond(..)))
            .unwrap_or(false);
        parts.push(if simple || generated.is_empty() {
            u.to_string()
        } else {
            format!("({u})")
        });
    }
    (!parts.is_empty()).then(|| parts.join(" && "))
}
