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

/// HTCondor machine attributes that requirements and rank expressions name
/// most: a JDL's `other.` is a GLUE computing element, which has none of them.
const CONDOR_MACHINE: [&str; 16] = [
    "memory",
    "disk",
    "cpus",
    "gpus",
    "arch",
    "opsys",
    "opsysandver",
    "opsysmajorver",
    "hassingularity",
    "hasdocker",
    "cudacapability",
    "machine",
    "mips",
    "kflops",
    "totalcpus",
    "has_avx",
];

/// The attributes `expr` names that a matchmaker reading `target`'s language
/// does not know: GLUE attributes (a gLite computing element's) for
/// HTCondor, HTCondor's machine attributes for JDL. Empty when the text does
/// not parse (it is then kept as it is).
pub(crate) fn foreign_to(expr: &str, target: crate::Format) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(mut p) = crate::classad::Parser::new(expr, 0, expr.len()) else {
        return found;
    };
    let Ok(tree) = p.expr() else { return found };
    walk(&tree, &mut |scope, name| {
        let lower = name.to_ascii_lowercase();
        let foreign = match target {
            crate::Format::Condor => lower.starts_with("glue"),
            crate::Format::Jdl => {
                !lower.starts_with("glue")
                    && (scope == Some(Scope::Target) || (scope.is_none() && CONDOR_MACHINE.contains(&lower.as_str())))
            }
            _ => false,
        };
        if foreign && !found.iter().any(|f: &String| f.eq_ignore_ascii_case(name)) {
            found.push(name.to_string());
        }
    });
    found
}

/// Calls `f` with every attribute reference in `e`.
fn walk(e: &Expr, f: &mut impl FnMut(Option<Scope>, &str)) {
    match &e.kind {
        Kind::Attr(scope, name) => f(*scope, name),
        Kind::Lit(_) => {}
        Kind::Unary(_, a) | Kind::Select(a, _) => walk(a, f),
        Kind::Binary(_, a, b) | Kind::Index(a, b) => {
            walk(a, f);
            walk(b, f);
        }
        Kind::Cond(c, a, b) => {
            walk(c, f);
            walk(a, f);
            walk(b, f);
        }
        Kind::Call(_, args) | Kind::List(args) => args.iter().for_each(|a| walk(a, f)),
        Kind::Record(fields) => fields.iter().for_each(|(_, a)| walk(a, f)),
    }
}

/// `expr` if `target` knows what it names; otherwise `None`, with a note in
/// `d` naming `what` and the attributes it does not know.
pub(crate) fn kept_for(
    target: crate::Format,
    what: &str,
    expr: Option<&str>,
    d: &mut crate::Dropped,
) -> Option<String> {
    let e = expr?;
    let foreign = foreign_to(e, target);
    if foreign.is_empty() {
        return Some(e.to_string());
    }
    let whose = if target == crate::Format::Condor {
        "a gLite computing element's (GLUE)"
    } else {
        "an HTCondor machine's"
    };
    d.note(format!(
        "{what}: `{e}` names {whose} attributes ({}), which {target} matches against nothing; dropped",
        foreign.join(", ")
    ));
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    #[test]
    fn each_matchmaker_is_told_what_it_cannot_match() {
        let glue = r#"other.GlueCEStateStatus == "Production" && other.GlueCEInfoTotalCPUs > CPUNumber"#;
        assert_eq!(
            foreign_to(glue, Format::Condor),
            ["GlueCEStateStatus", "GlueCEInfoTotalCPUs"]
        );
        assert!(foreign_to(glue, Format::Jdl).is_empty());
        let condor = "TARGET.HasSingularity && Memory >= 2048 && RequestCpus > 1";
        assert_eq!(foreign_to(condor, Format::Jdl), ["HasSingularity", "Memory"]);
        assert!(foreign_to(condor, Format::Condor).is_empty());
        let mut d = crate::Dropped::default();
        assert_eq!(kept_for(Format::Condor, "rank", Some(glue), &mut d), None);
        assert!(
            d.0[0].starts_with("rank: ") && d.0[0].contains("GlueCEStateStatus"),
            "{:?}",
            d.0
        );
        assert_eq!(
            kept_for(Format::Condor, "rank", Some("Mips"), &mut d).as_deref(),
            Some("Mips")
        );
    }
}
