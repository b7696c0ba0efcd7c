//! A recursive-descent parser for ClassAd expressions and records.

use super::ast::{BinOp, Expr, Kind, Scope, UnOp};
use super::lexer::{lex, Tok, Token};
use super::value::Value;
use crate::diag::Diagnostic;

/// Brackets nested deeper than this are refused with a positioned error
/// rather than risking the parser's stack (each level costs it a few frames).
const MAX_DEPTH: usize = 100;

/// Trees taller than this are refused too: every later walk over a tree
/// (evaluation, printing, dropping) recurses as deep as it is tall. Real
/// requirements are a few levels deep; a flat chain of 250 `||` still reads.
pub(crate) const MAX_HEIGHT: usize = 256;

pub(crate) struct Parser<'a> {
    full: &'a str,
    toks: Vec<Token>,
    i: usize,
    depth: usize,
    /// List items that are not expressions read as their text (DIRAC's JDL
    /// writes `{job.sh, LFN:/vo/a.dat}` unquoted); off for HTCondor.
    pub bare_list_items: bool,
}

/// One `name = expr` entry of a record, with the position of its name.
pub(crate) struct Entry {
    pub name: String,
    pub name_pos: usize,
    pub expr: Expr,
}

impl<'a> Parser<'a> {
    /// A parser over `full[start..end]`, reporting positions in `full`.
    pub fn new(full: &'a str, start: usize, end: usize) -> Result<Self, Diagnostic> {
        let toks = lex(&full[start..end], start, full)?;
        Ok(Parser {
            full,
            toks,
            i: 0,
            depth: 0,
            bare_list_items: false,
        })
    }

    /// A list item read as the text up to the next `,` or `}` outside
    /// brackets: a string.
    fn bare_item(&mut self) -> Result<Expr, Diagnostic> {
        let start = self.pos();
        let mut end = start;
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Tok::Eof => return Err(self.err("`}` closing the list")),
                Tok::Punct("," | "}") if depth == 0 => break,
                Tok::Punct("(" | "[" | "{") => depth += 1,
                Tok::Punct(")" | "]" | "}") => depth = depth.saturating_sub(1),
                _ => {}
            }
            end = self.bump().end;
        }
        let text = self.full[start..end].trim().to_string();
        Ok(Expr::new(Kind::Lit(Value::Str(text)), start, end))
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.i].tok
    }

    fn pos(&self) -> usize {
        self.toks[self.i].start
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn err(&self, expected: &str) -> Diagnostic {
        let found = match self.peek() {
            Tok::Eof => "end of input".to_string(),
            Tok::Int(n) => format!("`{n}`"),
            Tok::Real(r) => format!("`{r}`"),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Punct(p) => format!("`{p}`"),
        };
        Diagnostic::error_at(self.full, self.pos(), format!("expected {expected}, found {found}"))
    }

    fn expect(&mut self, p: &str) -> Result<usize, Diagnostic> {
        if self.is(p) {
            Ok(self.bump().end)
        } else {
            Err(self.err(&format!("`{p}`")))
        }
    }

    pub fn at_eof(&self) -> bool {
        matches!(self.peek(), Tok::Eof)
    }

    /// Fails unless all input was consumed.
    pub fn finish(&self) -> Result<(), Diagnostic> {
        if self.at_eof() {
            Ok(())
        } else {
            Err(self.err("an operator or end of input"))
        }
    }

    /// Whether the next token opens a record with `[`.
    pub fn at_bracket(&self) -> bool {
        self.is("[")
    }

    /// Record entries `name = expr` separated by `;`, with or without the brackets.
    pub fn entries(&mut self, bracketed: bool) -> Result<Vec<Entry>, Diagnostic> {
        if bracketed {
            self.expect("[")?;
        }
        let mut out = Vec::new();
        loop {
            if (bracketed && self.is("]")) || (!bracketed && self.at_eof()) {
                break;
            }
            let name_pos = self.pos();
            let Tok::Ident(name) = self.peek().clone() else {
                return Err(self.err("an attribute name"));
            };
            self.bump();
            self.expect("=")?;
            let expr = self.expr()?;
            out.push(Entry { name, name_pos, expr });
            if self.is(";") {
                self.bump();
            } else if (bracketed && !self.is("]")) || (!bracketed && !self.at_eof()) {
                return Err(self.err("`;` between attributes"));
            }
        }
        if bracketed {
            self.expect("]")?;
        }
        Ok(out)
    }

    /// Refuses a node taller than [`MAX_HEIGHT`].
    fn bounded(&self, e: Expr) -> Result<Expr, Diagnostic> {
        if e.height > MAX_HEIGHT {
            return Err(Diagnostic::error_at(
                self.full,
                e.start,
                format!("expression nested too deeply (more than {MAX_HEIGHT} levels of operators)"),
            ));
        }
        Ok(e)
    }

    /// Enters one level of recursion, refusing nesting beyond [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<(), Diagnostic> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Diagnostic::error_at(
                self.full,
                self.pos(),
                format!("expression nested too deeply (more than {MAX_DEPTH} levels of brackets)"),
            ));
        }
        Ok(())
    }

    /// One expression.
    pub fn expr(&mut self) -> Result<Expr, Diagnostic> {
        self.enter()?;
        let r = self.cond();
        self.depth -= 1;
        r
    }

    fn cond(&mut self) -> Result<Expr, Diagnostic> {
        let c = self.binary(0)?;
        if self.is("?") {
            self.bump();
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            let (start, end) = (c.start, b.end);
            return self.bounded(Expr::new(Kind::Cond(Box::new(c), Box::new(a), Box::new(b)), start, end));
        }
        Ok(c)
    }

    fn binop(&self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::Punct(p) => match *p {
                "||" => BinOp::Or,
                "&&" => BinOp::And,
                "|" => BinOp::BitOr,
                "^" => BinOp::BitXor,
                "&" => BinOp::BitAnd,
                "==" => BinOp::Eq,
                "!=" => BinOp::Ne,
                "=?=" => BinOp::Is,
                "=!=" => BinOp::Isnt,
                "<" => BinOp::Lt,
                "<=" => BinOp::Le,
                ">" => BinOp::Gt,
                ">=" => BinOp::Ge,
                "<<" => BinOp::Shl,
                ">>" => BinOp::Shr,
                ">>>" => BinOp::UShr,
                "+" => BinOp::Add,
                "-" => BinOp::Sub,
                "*" => BinOp::Mul,
                "/" => BinOp::Div,
                "%" => BinOp::Mod,
                _ => return None,
            },
            Tok::Ident(s) if s.eq_ignore_ascii_case("is") => BinOp::Is,
            Tok::Ident(s) if s.eq_ignore_ascii_case("isnt") => BinOp::Isnt,
            _ => return None,
        })
    }

    /// Operators of precedence `min` and above, left-associative, by
    /// precedence climbing: one frame per rising precedence, not one per
    /// level of the grammar, so bracket nesting costs few frames each.
    fn binary(&mut self, min: usize) -> Result<Expr, Diagnostic> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.binop().filter(|&op| precedence(op) >= min) {
            self.bump();
            let rhs = self.binary(precedence(op) + 1)?;
            let (start, end) = (lhs.start, rhs.end);
            lhs = self.bounded(Expr::new(Kind::Binary(op, Box::new(lhs), Box::new(rhs)), start, end))?;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, Diagnostic> {
        let op = match self.peek() {
            Tok::Punct("-") => Some(UnOp::Neg),
            Tok::Punct("+") => Some(UnOp::Plus),
            Tok::Punct("!") => Some(UnOp::Not),
            Tok::Punct("~") => Some(UnOp::BitNot),
            _ => None,
        };
        if let Some(op) = op {
            let start = self.bump().start;
            self.enter()?;
            let e = self.unary()?;
            self.depth -= 1;
            let end = e.end;
            return self.bounded(Expr::new(Kind::Unary(op, Box::new(e)), start, end));
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, Diagnostic> {
        let mut e = self.primary()?;
        loop {
            if self.is(".") {
                self.bump();
                let Tok::Ident(name) = self.peek().clone() else {
                    return Err(self.err("an attribute name after `.`"));
                };
                let t = self.bump();
                let start = e.start;
                e = self.bounded(Expr::new(Kind::Select(Box::new(e), name), start, t.end))?;
            } else if self.is("[") {
                self.bump();
                let idx = self.expr()?;
                let end = self.expect("]")?;
                let start = e.start;
                e = self.bounded(Expr::new(Kind::Index(Box::new(e), Box::new(idx)), start, end))?;
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, Diagnostic> {
        let start = self.pos();
        let lit = |v: Value, end: usize| Ok(Expr::new(Kind::Lit(v), start, end));
        match self.peek().clone() {
            Tok::Int(n) => {
                let t = self.bump();
                lit(Value::Int(n), t.end)
            }
            Tok::Real(r) => {
                let t = self.bump();
                lit(Value::Real(r), t.end)
            }
            Tok::Str(s) => {
                let t = self.bump();
                lit(Value::Str(s), t.end)
            }
            Tok::Punct("(") => {
                self.bump();
                let mut e = self.expr()?;
                e.end = self.expect(")")?;
                e.start = start;
                Ok(e)
            }
            Tok::Punct("{") => {
                self.bump();
                let mut items = Vec::new();
                while !self.is("}") {
                    let at = self.i;
                    match self.expr() {
                        Ok(e) if self.is(",") || self.is("}") => items.push(e),
                        _ if self.bare_list_items => {
                            self.i = at;
                            items.push(self.bare_item()?);
                        }
                        Ok(_) => return Err(self.err("`,` or `}` in a list")),
                        Err(e) => return Err(e),
                    }
                    if self.is(",") {
                        self.bump();
                    } else if !self.is("}") {
                        return Err(self.err("`,` or `}` in a list"));
                    }
                }
                let end = self.expect("}")?;
                self.bounded(Expr::new(Kind::List(items), start, end))
            }
            Tok::Punct("[") => {
                let entries = self.entries(true)?;
                let end = self.toks[self.i.saturating_sub(1)].end;
                self.bounded(Expr::new(
                    Kind::Record(entries.into_iter().map(|e| (e.name, e.expr)).collect()),
                    start,
                    end,
                ))
            }
            Tok::Ident(name) => {
                let t = self.bump();
                let lower = name.to_ascii_lowercase();
                match lower.as_str() {
                    "true" => return lit(Value::Bool(true), t.end),
                    "false" => return lit(Value::Bool(false), t.end),
                    "undefined" => return lit(Value::Undefined, t.end),
                    "error" => return lit(Value::Error, t.end),
                    _ => {}
                }
                let scope = match lower.as_str() {
                    "my" | "self" => Some(Scope::My),
                    "target" | "other" => Some(Scope::Target),
                    "parent" => Some(Scope::Parent),
                    _ => None,
                };
                if let Some(scope) = scope {
                    if self.is(".") {
                        self.bump();
                        let Tok::Ident(attr) = self.peek().clone() else {
                            return Err(self.err("an attribute name after the scope"));
                        };
                        let n = self.bump();
                        return Ok(Expr::new(Kind::Attr(Some(scope), attr), start, n.end));
                    }
                }
                if self.is("(") {
                    self.bump();
                    let mut args = Vec::new();
                    while !self.is(")") {
                        args.push(self.expr()?);
                        if self.is(",") {
                            self.bump();
                        } else if !self.is(")") {
                            return Err(self.err("`,` or `)` in the argument list"));
                        }
                    }
                    let end = self.expect(")")?;
                    return self.bounded(Expr::new(Kind::Call(name, args), start, end));
                }
                Ok(Expr::new(Kind::Attr(None, name), start, t.end))
            }
            _ => Err(self.err("an expression")),
        }
    }
}

fn precedence(op: BinOp) -> usize {
    match op {
        BinOp::Or => 0,
        BinOp::And => 1,
        BinOp::BitOr => 2,
        BinOp::BitXor => 3,
        BinOp::BitAnd => 4,
        BinOp::Eq | BinOp::Ne | BinOp::Is | BinOp::Isnt => 5,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 6,
        BinOp::Shl | BinOp::Shr | BinOp::UShr => 7,
        BinOp::Add | BinOp::Sub => 8,
        BinOp::Mul | BinOp::Div | BinOp::Mod => 9,
    }
}
