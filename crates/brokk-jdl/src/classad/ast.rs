//! ClassAd expression trees and their printed form.

use std::fmt;

use super::value::Value;

/// Which ad an attribute reference is looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `MY.` / `self.`: the ad that holds the expression.
    My,
    /// `TARGET.` / `other.`: the ad it is matched against.
    Target,
    /// `parent.`: the enclosing ad of a nested record.
    Parent,
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    /// `-`
    Neg,
    /// `+`
    Plus,
    /// `!`
    Not,
    /// `~`
    BitNot,
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum BinOp {
    Or,
    And,
    BitOr,
    BitXor,
    BitAnd,
    Eq,
    Ne,
    Is,
    Isnt,
    Lt,
    Le,
    Gt,
    Ge,
    Shl,
    Shr,
    UShr,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::BitAnd => "&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Is => "=?=",
            BinOp::Isnt => "=!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::UShr => ">>>",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
        }
    }
}

/// An expression node and the byte range of the source it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What the node is.
    pub kind: Kind,
    /// Byte offset where it starts in the parsed text.
    pub start: usize,
    /// Byte offset just past its end.
    pub end: usize,
    /// Levels of nodes from here to the deepest leaf (1 for a leaf): every
    /// walk over a tree recurses this deep, so readers bound it.
    pub height: usize,
}

impl Expr {
    /// A node over `kind`, its height taken from its children.
    pub fn new(kind: Kind, start: usize, end: usize) -> Expr {
        let below = match &kind {
            Kind::Lit(_) | Kind::Attr(..) => 0,
            Kind::Unary(_, a) | Kind::Select(a, _) => a.height,
            Kind::Binary(_, a, b) | Kind::Index(a, b) => a.height.max(b.height),
            Kind::Cond(a, b, c) => a.height.max(b.height).max(c.height),
            Kind::Call(_, xs) | Kind::List(xs) => xs.iter().map(|x| x.height).max().unwrap_or(0),
            Kind::Record(fields) => fields.iter().map(|(_, x)| x.height).max().unwrap_or(0),
        };
        Expr {
            kind,
            start,
            end,
            height: below + 1,
        }
    }
}

/// The kinds of expression node.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A literal value.
    Lit(Value),
    /// An attribute reference, optionally scoped.
    Attr(Option<Scope>, String),
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `c ? a : b`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A built-in function call; the name is kept as written.
    Call(String, Vec<Expr>),
    /// `{a, b, ...}`.
    List(Vec<Expr>),
    /// `[a = 1; b = 2]`.
    Record(Vec<(String, Expr)>),
    /// `e.name`.
    Select(Box<Expr>, String),
    /// `e[i]`.
    Index(Box<Expr>, Box<Expr>),
}

fn write_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            name.to_ascii_lowercase().as_str(),
            "true" | "false" | "undefined" | "error" | "is" | "isnt" | "my" | "target" | "other" | "self" | "parent"
        );
    if plain {
        f.write_str(name)
    } else {
        write!(f, "'{}'", name.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// Prints fully parenthesised, so that the text parses back to the same tree.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Lit(v) => write!(f, "{v}"),
            Kind::Attr(scope, name) => {
                match scope {
                    Some(Scope::My) => f.write_str("MY.")?,
                    Some(Scope::Target) => f.write_str("TARGET.")?,
                    Some(Scope::Parent) => f.write_str("parent.")?,
                    None => {}
                }
                write_name(f, name)
            }
            Kind::Unary(op, e) => {
                let s = match op {
                    UnOp::Neg => "-",
                    UnOp::Plus => "+",
                    UnOp::Not => "!",
                    UnOp::BitNot => "~",
                };
                write!(f, "({s}{e})")
            }
            Kind::Binary(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
            Kind::Cond(c, a, b) => write!(f, "({c} ? {a} : {b})"),
            Kind::Call(name, args) => {
                write!(f, "{name}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Kind::List(items) => {
                f.write_str("{")?;
                for (i, a) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str("}")
            }
            Kind::Record(fields) => {
                f.write_str("[")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write_name(f, k)?;
                    write!(f, " = {v}")?;
                }
                f.write_str("]")
            }
            Kind::Select(e, name) => {
                write!(f, "{e}.")?;
                write_name(f, name)
            }
            Kind::Index(e, i) => write!(f, "{e}[{i}]"),
        }
    }
}
