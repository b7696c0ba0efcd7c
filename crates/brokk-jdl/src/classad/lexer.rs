//! Tokens of the ClassAd language.

use crate::diag::Diagnostic;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Int(i64),
    Real(f64),
    Str(String),
    /// An identifier, or a `'quoted attribute name'`.
    Ident(String),
    /// An operator or punctuation, as written.
    Punct(&'static str),
    Eof,
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub start: usize,
    pub end: usize,
}

/// Longest operators first so that `=?=` wins over `=`.
const PUNCT: &[&str] = &[
    ">>>", "=?=", "=!=", "==", "!=", "<=", ">=", "&&", "||", "<<", ">>", "(", ")", "[", "]", "{", "}", ",", ";", ".",
    "?", ":", "+", "-", "*", "/", "%", "!", "~", "<", ">", "&", "|", "^", "=",
];

pub(crate) fn lex(src: &str, base: usize, full: &str) -> Result<Vec<Token>, Diagnostic> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let err = |at: usize, msg: String| Diagnostic::error_at(full, base + at, msg);
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"//") || c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if b[i..].starts_with(b"/*") {
            match src[i + 2..].find("*/") {
                Some(k) => i += k + 4,
                None => return Err(err(i, "unterminated comment: expected `*/`".into())),
            }
            continue;
        }
        let start = i;
        let tok = if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            number(src, &mut i)
                .ok_or_else(|| err(start, format!("malformed number `{}`", &src[start..i.max(start + 1)])))?
        } else if c == b'"' || c == b'\'' {
            let s = string(src, &mut i, c).ok_or_else(|| {
                err(
                    start,
                    format!("unterminated string: expected a closing `{}`", c as char),
                )
            })?;
            if c == b'"' {
                Tok::Str(s)
            } else {
                Tok::Ident(s)
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Tok::Ident(src[start..i].to_string())
        } else if let Some(p) = PUNCT.iter().find(|p| b[i..].starts_with(p.as_bytes())) {
            i += p.len();
            Tok::Punct(p)
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(err(i, format!("unexpected character `{ch}`")));
        };
        out.push(Token {
            tok,
            start: base + start,
            end: base + i,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        start: base + b.len(),
        end: base + b.len(),
    });
    Ok(out)
}

fn number(src: &str, i: &mut usize) -> Option<Tok> {
    let b = src.as_bytes();
    let start = *i;
    if b[start..].starts_with(b"0x") || b[start..].starts_with(b"0X") {
        *i += 2;
        while *i < b.len() && b[*i].is_ascii_hexdigit() {
            *i += 1;
        }
        return i64::from_str_radix(&src[start + 2..*i], 16).ok().map(Tok::Int);
    }
    let mut real = false;
    while *i < b.len() && b[*i].is_ascii_digit() {
        *i += 1;
    }
    if *i < b.len()
        && b[*i] == b'.'
        && !b
            .get(*i + 1)
            .is_some_and(|c| c.is_ascii_alphabetic() && *c != b'e' && *c != b'E')
    {
        real = true;
        *i += 1;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
    }
    if *i < b.len() && (b[*i] == b'e' || b[*i] == b'E') {
        let save = *i;
        *i += 1;
        if *i < b.len() && (b[*i] == b'+' || b[*i] == b'-') {
            *i += 1;
        }
        if *i < b.len() && b[*i].is_ascii_digit() {
            real = true;
            while *i < b.len() && b[*i].is_ascii_digit() {
                *i += 1;
            }
        } else {
            *i = save;
        }
    }
    let text = &src[start..*i];
    if real {
        text.parse().ok().map(Tok::Real)
    } else {
        text.parse().ok().map(Tok::Int)
    }
}

fn string(src: &str, i: &mut usize, q: u8) -> Option<String> {
    let mut out = String::new();
    let mut chars = src[*i + 1..].char_indices();
    while let Some((k, c)) = chars.next() {
        match c {
            '\\' => {
                let (_, e) = chars.next()?;
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    other => other,
                });
            }
            c if c as u32 == u32::from(q) => {
                *i += 1 + k + 1;
                return Some(out);
            }
            c => out.push(c),
        }
    }
    None
}
