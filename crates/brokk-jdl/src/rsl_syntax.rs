//! The RSL syntax shared by Globus RSL (GRAM5) and ARC xRSL: `&`, `|` and `+`
//! specification lists, relations `(attr op values)`, nested value sequences,
//! quoted and unquoted literals, `#` concatenation, `$(VAR)` references and
//! `(* comments *)`.

use crate::diag::Diagnostic;

/// A relational operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A specification: a relation, or an operator applied to a list of specifications.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Spec {
    /// `&(...)(...)`: all relations apply.
    And(Vec<Spec>),
    /// `|(...)(...)`: alternatives.
    Or(Vec<Spec>),
    /// `+(...)(...)`: a multi-request, one job per entry.
    Multi(Vec<Spec>),
    /// `attr op value...`.
    Rel(Relation),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Relation {
    /// Attribute as written.
    pub attr: String,
    /// Byte offset of the attribute.
    pub pos: usize,
    pub op: Op,
    pub values: Vec<Value>,
}

/// Part of a literal: text, or a `$(NAME)` reference to substitute.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    Text(String),
    Var(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A (possibly concatenated) literal.
    Lit { parts: Vec<Part>, pos: usize },
    /// A parenthesised sequence.
    Seq { items: Vec<Value>, pos: usize },
}

impl Value {
    pub fn pos(&self) -> usize {
        match self {
            Value::Lit { pos, .. } | Value::Seq { pos, .. } => *pos,
        }
    }
}

/// Parses a whole RSL text into one specification.
pub(crate) fn parse(src: &str) -> Result<Spec, Diagnostic> {
    let mut p = Parser {
        src,
        b: src.as_bytes(),
        i: 0,
        depth: 0,
    };
    p.skip_ws()?;
    let spec = if p.peek() == Some(b'(') {
        // A bare list of relations is read as a conjunction.
        Spec::And(p.spec_list()?)
    } else {
        p.spec()?
    };
    p.skip_ws()?;
    if p.i < p.b.len() {
        return Err(p.err("expected end of input after the specification"));
    }
    Ok(spec)
}

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    i: usize,
    /// Open brackets around the current position.
    depth: usize,
}

/// Brackets nested deeper than this are refused with a positioned error
/// rather than risking the stack; real RSL nests two or three levels.
const MAX_DEPTH: usize = 64;

const SPECIAL: &[u8] = b"()=<>!\"'#$+&|^";

impl<'a> Parser<'a> {
    /// Enters one bracket, refusing nesting beyond [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<(), Diagnostic> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Diagnostic::error_at(
                self.src,
                self.i,
                format!("brackets nested too deeply (more than {MAX_DEPTH} levels)"),
            ));
        }
        Ok(())
    }

    fn err(&self, msg: &str) -> Diagnostic {
        let found = match self.src[self.i.min(self.src.len())..].chars().next() {
            Some(c) => format!(", found `{c}`"),
            None => ", found end of input".to_string(),
        };
        Diagnostic::error_at(self.src, self.i, format!("{msg}{found}"))
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip_ws(&mut self) -> Result<(), Diagnostic> {
        loop {
            while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                self.i += 1;
            }
            if self.b[self.i..].starts_with(b"(*") {
                let start = self.i;
                match self.src[self.i + 2..].find("*)") {
                    Some(end) => self.i += 2 + end + 2,
                    None => {
                        return Err(Diagnostic::error_at(
                            self.src,
                            start,
                            "unterminated comment: expected `*)`",
                        ));
                    }
                }
            } else {
                return Ok(());
            }
        }
    }

    fn spec(&mut self) -> Result<Spec, Diagnostic> {
        self.skip_ws()?;
        match self.peek() {
            Some(b'&') => {
                self.i += 1;
                self.skip_ws()?;
                // A bare `&` is an empty job, which is how a job with no attributes is written.
                if matches!(self.peek(), None | Some(b')')) {
                    return Ok(Spec::And(Vec::new()));
                }
                Ok(Spec::And(self.spec_list()?))
            }
            Some(b'|') => {
                self.i += 1;
                Ok(Spec::Or(self.spec_list()?))
            }
            Some(b'+') => {
                self.i += 1;
                Ok(Spec::Multi(self.spec_list()?))
            }
            _ => Ok(Spec::Rel(self.relation()?)),
        }
    }

    fn spec_list(&mut self) -> Result<Vec<Spec>, Diagnostic> {
        let mut out = Vec::new();
        loop {
            self.skip_ws()?;
            if self.peek() != Some(b'(') {
                if out.is_empty() {
                    return Err(self.err("expected `(` to open a relation"));
                }
                return Ok(out);
            }
            self.i += 1;
            self.enter()?;
            out.push(self.spec()?);
            self.depth -= 1;
            self.skip_ws()?;
            if self.peek() != Some(b')') {
                return Err(self.err("expected `)` to close the relation"));
            }
            self.i += 1;
        }
    }

    fn relation(&mut self) -> Result<Relation, Diagnostic> {
        self.skip_ws()?;
        let pos = self.i;
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.')
        {
            self.i += 1;
        }
        if start == self.i {
            return Err(self.err("expected an attribute name"));
        }
        let attr = self.src[start..self.i].to_string();
        self.skip_ws()?;
        let op = match (self.peek(), self.b.get(self.i + 1).copied()) {
            (Some(b'='), _) => (Op::Eq, 1),
            (Some(b'!'), Some(b'=')) => (Op::Ne, 2),
            (Some(b'<'), Some(b'=')) => (Op::Le, 2),
            (Some(b'>'), Some(b'=')) => (Op::Ge, 2),
            (Some(b'<'), _) => (Op::Lt, 1),
            (Some(b'>'), _) => (Op::Gt, 1),
            _ => return Err(self.err(&format!("expected an operator (=, !=, <, <=, >, >=) after `{attr}`"))),
        };
        self.i += op.1;
        let values = self.value_seq()?;
        Ok(Relation {
            attr,
            pos,
            op: op.0,
            values,
        })
    }

    fn value_seq(&mut self) -> Result<Vec<Value>, Diagnostic> {
        let mut out = Vec::new();
        loop {
            self.skip_ws()?;
            match self.peek() {
                None | Some(b')') => return Ok(out),
                Some(b'(') => {
                    let pos = self.i;
                    self.i += 1;
                    self.enter()?;
                    let items = self.value_seq()?;
                    self.depth -= 1;
                    self.skip_ws()?;
                    if self.peek() != Some(b')') {
                        return Err(self.err("expected `)` to close the value sequence"));
                    }
                    self.i += 1;
                    out.push(Value::Seq { items, pos });
                }
                _ => out.push(self.literal()?),
            }
        }
    }

    /// A simple value: quoted or unquoted pieces and `$(VAR)` joined by `#`.
    fn literal(&mut self) -> Result<Value, Diagnostic> {
        let pos = self.i;
        let mut parts = Vec::new();
        loop {
            match self.peek() {
                Some(q @ (b'"' | b'\'')) => parts.push(Part::Text(self.quoted(q)?)),
                Some(b'$') => {
                    if self.b.get(self.i + 1) != Some(&b'(') {
                        return Err(self.err("expected `$(NAME)`"));
                    }
                    self.i += 2;
                    self.skip_ws()?;
                    let start = self.i;
                    while self
                        .peek()
                        .is_some_and(|c| !c.is_ascii_whitespace() && !SPECIAL.contains(&c))
                    {
                        self.i += 1;
                    }
                    if start == self.i {
                        return Err(self.err("expected a variable name in `$(...)`"));
                    }
                    let name = self.src[start..self.i].to_string();
                    self.skip_ws()?;
                    if self.peek() != Some(b')') {
                        return Err(self.err("expected `)` after the variable name"));
                    }
                    self.i += 1;
                    parts.push(Part::Var(name));
                }
                Some(c) if !c.is_ascii_whitespace() && !SPECIAL.contains(&c) => {
                    let start = self.i;
                    while self
                        .peek()
                        .is_some_and(|c| !c.is_ascii_whitespace() && !SPECIAL.contains(&c))
                    {
                        if self.b[self.i..].starts_with(b"(*") {
                            break;
                        }
                        self.i += 1;
                    }
                    parts.push(Part::Text(self.src[start..self.i].to_string()));
                }
                _ => return Err(self.err("expected a value")),
            }
            // Pieces that touch (`$(HOME)/bin`) concatenate implicitly.
            if self.peek().is_some_and(|c| {
                c == b'"' || c == b'\'' || c == b'$' || (!c.is_ascii_whitespace() && !SPECIAL.contains(&c))
            }) && !self.b[self.i..].starts_with(b"(*")
            {
                continue;
            }
            // `#` concatenates with the next piece, whitespace allowed around it.
            let save = self.i;
            self.skip_ws()?;
            if self.peek() == Some(b'#') {
                self.i += 1;
                self.skip_ws()?;
            } else {
                self.i = save;
                return Ok(Value::Lit { parts, pos });
            }
        }
    }

    fn quoted(&mut self, q: u8) -> Result<String, Diagnostic> {
        let start = self.i;
        self.i += 1;
        let mut out = String::new();
        loop {
            let rest = &self.src[self.i..];
            match rest.find(q as char) {
                None => {
                    return Err(Diagnostic::error_at(
                        self.src,
                        start,
                        format!("unterminated string: expected a closing `{}`", q as char),
                    ))
                }
                Some(k) => {
                    out.push_str(&rest[..k]);
                    self.i += k + 1;
                    // A doubled quote stands for the quote character itself.
                    if self.peek() == Some(q) {
                        out.push(q as char);
                        self.i += 1;
                    } else {
                        return Ok(out);
                    }
                }
            }
        }
    }
}

/// Writes a literal, quoted so that it reads back unchanged.
pub(crate) fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_sequences_comments_and_concatenation() {
        let text = "&(* c *)(a = \"x\"\"y\" 'z')(b=(p q)(r))(c = $(HOME) # /bin)";
        let spec = parse(text).unwrap();
        let Spec::And(items) = spec else {
            panic!("not a conjunction")
        };
        assert_eq!(items.len(), 3);
        let Spec::Rel(a) = &items[0] else { panic!() };
        assert_eq!(
            a.values,
            vec![
                Value::Lit {
                    parts: vec![Part::Text("x\"y".into())],
                    pos: 13
                },
                Value::Lit {
                    parts: vec![Part::Text("z".into())],
                    pos: 20
                }
            ]
        );
        let Spec::Rel(c) = &items[2] else { panic!() };
        assert_eq!(
            c.values[0],
            Value::Lit {
                parts: vec![Part::Var("HOME".into()), Part::Text("/bin".into())],
                pos: text.find('$').unwrap()
            }
        );
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = parse("&(count 4)").unwrap_err();
        assert_eq!((e.line, e.column), (1, 9));
        assert!(e.message.starts_with("expected an operator"), "{}", e.message);
        let e = parse("&(a = \"x)").unwrap_err();
        assert_eq!((e.line, e.column), (1, 7));
        let e = parse("&(a = b)\n(* open").unwrap_err();
        assert_eq!(e.line, 2);
    }
}

/// Helpers that the xRSL and RSL readers share for turning relations into jobs.
pub(crate) mod lower {
    use std::collections::HashMap;

    use super::{Op, Part, Relation, Spec, Value};
    use crate::diag::Diagnostic;

    /// The relations of one job, and where `|` alternatives were left out.
    pub type JobRelations = (Vec<Relation>, Vec<usize>);

    /// The relations of each job in a specification: one list per `+` entry.
    /// `|` alternatives are returned separately so the caller can warn about them.
    pub fn jobs(src: &str, spec: Spec) -> Result<Vec<JobRelations>, Diagnostic> {
        match spec {
            Spec::Multi(items) => {
                let mut out = Vec::new();
                for item in items {
                    if let Spec::Multi(_) = item {
                        return Err(Diagnostic::error_at(
                            src,
                            0,
                            "a multi-request `+` cannot contain another `+`",
                        ));
                    }
                    out.extend(jobs(src, item)?);
                }
                Ok(out)
            }
            other => {
                let mut rels = Vec::new();
                let mut ors = Vec::new();
                flatten(other, &mut rels, &mut ors);
                Ok(vec![(rels, ors)])
            }
        }
    }

    fn flatten(spec: Spec, rels: &mut Vec<Relation>, ors: &mut Vec<usize>) {
        match spec {
            Spec::Rel(r) => rels.push(r),
            Spec::And(items) | Spec::Multi(items) => items.into_iter().for_each(|s| flatten(s, rels, ors)),
            Spec::Or(items) => {
                if let Some(pos) = items.iter().find_map(first_pos) {
                    ors.push(pos);
                }
            }
        }
    }

    fn first_pos(spec: &Spec) -> Option<usize> {
        match spec {
            Spec::Rel(r) => Some(r.pos),
            Spec::And(i) | Spec::Or(i) | Spec::Multi(i) => i.iter().find_map(first_pos),
        }
    }

    /// Parses an RSL text and reads each of its jobs with `read_job`, warning about
    /// `|` alternatives, which Brokk does not use.
    pub fn read_jobs(
        src: &str,
        mut read_job: impl FnMut(&[Relation], &mut Vec<Diagnostic>) -> Result<brokk_model::Job, crate::ParseError>,
    ) -> Result<crate::Parsed, crate::ParseError> {
        let spec = super::parse(src)?;
        let mut jobs = Vec::new();
        let mut warnings = Vec::new();
        // Every job of a multi-request is read: one pass reports every error.
        let mut errors = Vec::new();
        for (rels, ors) in self::jobs(src, spec)? {
            for pos in ors {
                warnings.push(Diagnostic::warning_at(
                    src,
                    pos,
                    "`|` alternatives are not used by Brokk; ignored",
                ));
            }
            match read_job(&rels, &mut warnings) {
                Ok(job) => jobs.push(job),
                Err(e) => errors.extend(e.diagnostics),
            }
        }
        if !errors.is_empty() {
            return Err(crate::ParseError { diagnostics: errors });
        }
        Ok(crate::Parsed {
            jobs,
            warnings,
            together: false,
        })
    }

    /// Writes jobs with `write_job`; several become a `+` multi-request.
    pub fn write_jobs(
        jobs: &[brokk_model::Job],
        mut write_job: impl FnMut(&brokk_model::Job, &mut crate::Dropped) -> String,
    ) -> crate::Written {
        let mut dropped = crate::Dropped::default();
        let text = if jobs.len() == 1 {
            write_job(&jobs[0], &mut dropped)
        } else {
            let mut s = String::from("+");
            for j in jobs {
                s.push('(');
                s.push_str(write_job(j, &mut dropped).trim_end());
                s.push_str(")\n");
            }
            s
        };
        dropped.finish(text)
    }

    /// The variable globusrun defines as its own GASS server, which serves
    /// the submitting machine's files to the job: `$(GLOBUSRUN_GASS_URL) #
    /// /home/ann/in.dat` is that machine's file (kept as written here, and
    /// read as an upload by the RSL reader).
    pub const GASS_URL: &str = "GLOBUSRUN_GASS_URL";

    /// Variables from `rsl_substitution` relations, resolved in order.
    #[derive(Default)]
    pub struct Vars(HashMap<String, String>);

    impl Vars {
        /// Defines the `(NAME value)` pairs of one `rsl_substitution` relation.
        pub fn define(&mut self, src: &str, rel: &Relation) -> Result<(), Diagnostic> {
            for v in &rel.values {
                let pair = seq(src, v, 2, 2, "(NAME value)")?;
                let name = self.text(src, &pair[0])?;
                let value = self.text(src, &pair[1])?;
                self.0.insert(name, value);
            }
            Ok(())
        }

        /// The string a literal stands for, with `$(VAR)` substituted.
        pub fn text(&self, src: &str, v: &Value) -> Result<String, Diagnostic> {
            match v {
                Value::Lit { parts, pos } => {
                    let mut out = String::new();
                    for p in parts {
                        match p {
                            Part::Text(t) => out.push_str(t),
                            Part::Var(name) => match self.0.get(name) {
                                Some(val) => out.push_str(val),
                                // GRAM's own: the site that runs the job fills it in.
                                None if crate::assign::GRAM_VARIABLES.contains(&name.as_str()) || name == GASS_URL => {
                                    out.push_str(&format!("$({name})"))
                                }
                                None => {
                                    return Err(Diagnostic::error_at(
                                        src,
                                        *pos,
                                        format!("undefined variable `$({name})`: define it with rsl_substitution"),
                                    ))
                                }
                            },
                        }
                    }
                    Ok(out)
                }
                Value::Seq { pos, .. } => Err(Diagnostic::error_at(
                    src,
                    *pos,
                    "expected a single value, found a `(...)` sequence",
                )),
            }
        }

        /// The `(first second)` pairs of a relation, e.g. `(NAME value)` environment entries.
        pub fn pairs(&self, src: &str, rel: &Relation, shape: &str) -> Result<Vec<(String, String)>, Diagnostic> {
            rel.values
                .iter()
                .map(|v| {
                    let pair = seq(src, v, 2, 2, shape)?;
                    Ok((self.text(src, &pair[0])?, self.text(src, &pair[1])?))
                })
                .collect()
        }

        /// The one literal value of a relation.
        pub fn single(&self, src: &str, rel: &Relation) -> Result<String, Diagnostic> {
            expect_eq(src, rel)?;
            match rel.values.as_slice() {
                [v] => self.text(src, v),
                [] => Err(Diagnostic::error_at(
                    src,
                    rel.pos,
                    format!("`{}` needs a value", rel.attr),
                )),
                [_, v, ..] => Err(Diagnostic::error_at(
                    src,
                    v.pos(),
                    format!("`{}` takes one value; quote it if it contains spaces", rel.attr),
                )),
            }
        }

        /// Every value of a relation as a flat list of strings.
        pub fn list(&self, src: &str, rel: &Relation) -> Result<Vec<String>, Diagnostic> {
            expect_eq(src, rel)?;
            rel.values.iter().map(|v| self.text(src, v)).collect()
        }

        /// A non-negative integer value.
        pub fn number<T: std::str::FromStr>(&self, src: &str, rel: &Relation) -> Result<T, Diagnostic> {
            let s = self.single(src, rel)?;
            s.trim().parse().map_err(|_| {
                Diagnostic::error_at(
                    src,
                    rel.values[0].pos(),
                    format!("`{}` expects a non-negative integer, found `{s}`", rel.attr),
                )
            })
        }
    }

    /// The items of a `(...)` sequence value with between `min` and `max` entries.
    pub fn seq<'v>(src: &str, v: &'v Value, min: usize, max: usize, shape: &str) -> Result<&'v [Value], Diagnostic> {
        match v {
            Value::Seq { items, pos } if items.len() >= min && items.len() <= max => Ok(items),
            Value::Seq { pos, .. } | Value::Lit { pos, .. } => {
                Err(Diagnostic::error_at(src, *pos, format!("expected a sequence {shape}")))
            }
        }
    }

    fn expect_eq(src: &str, rel: &Relation) -> Result<(), Diagnostic> {
        if rel.op == Op::Eq {
            Ok(())
        } else {
            Err(Diagnostic::error_at(
                src,
                rel.pos,
                format!("`{}` only takes `=`", rel.attr),
            ))
        }
    }
}
