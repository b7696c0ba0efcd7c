//! Diagnostics with line and column, rendered with the offending line and a caret.

use std::fmt;

use serde::Serialize;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The description cannot be read.
    Error,
    /// Read, but something was ignored or guessed.
    Warning,
}

/// One message about a position in a job description. Lines and columns count from 1;
/// columns count characters, not bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// 1-based line.
    pub line: usize,
    /// 1-based column in characters.
    pub column: usize,
    /// What is wrong and, for errors, what was expected.
    pub message: String,
}

impl Diagnostic {
    /// An error at byte offset `offset` of `src`.
    pub fn error_at(src: &str, offset: usize, message: impl Into<String>) -> Self {
        let (line, column) = line_col(src, offset);
        Diagnostic {
            severity: Severity::Error,
            line,
            column,
            message: message.into(),
        }
    }

    /// A warning at byte offset `offset` of `src`.
    pub fn warning_at(src: &str, offset: usize, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error_at(src, offset, message)
        }
    }

    /// Renders `file:line:column: severity: message`, the source line and a caret.
    pub fn render(&self, file: &str, src: &str) -> String {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let text = line_text(src, self.line);
        let pad: String = text
            .chars()
            .take(self.column.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let gutter = self.line.to_string();
        let blank = " ".repeat(gutter.len());
        format!(
            "{file}:{}:{}: {kind}: {}\n{blank} |\n{gutter} | {text}\n{blank} | {pad}^\n",
            self.line, self.column, self.message
        )
    }
}

/// Renders each of `diagnostics` as [`Diagnostic::render`] does, `src`'s
/// lines found once for them all.
pub fn render_all(diagnostics: &[Diagnostic], file: &str, src: &str) -> String {
    let _lines = indexed(src);
    diagnostics.iter().map(|d| d.render(file, src)).collect()
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// The 1-based line and character column of byte `offset` in `src` (clamped to the end,
/// and to the nearest character boundary).
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let (line, line_start) = with_line_starts(src, |starts| {
        let k = starts.partition_point(|&start| start <= offset);
        (k, starts[k - 1])
    });
    let column = src[line_start..offset].chars().count() + 1;
    (line, column)
}

/// The text of line `line` (from 1) of `src`, without its line break.
fn line_text(src: &str, line: usize) -> &str {
    let Some(start) = with_line_starts(src, |starts| starts.get(line.saturating_sub(1)).copied()) else {
        return "";
    };
    let rest = &src[start..];
    let line = rest.split('\n').next().unwrap_or("");
    line.strip_suffix('\r').unwrap_or(line)
}

/// Runs `f` on where `src`'s lines start. A reader may report thousands of
/// diagnostics on one large text (a collection's every node): a text being
/// read is [`indexed`] once and found by its address, instead of being
/// counted again for each (a 5 MB collection with a warning per node took
/// 16 s to read when every diagnostic compared the text with the last one
/// placed). Another text is counted for the one diagnostic.
fn with_line_starts<T>(src: &str, f: impl FnOnce(&[usize]) -> T) -> T {
    let registered = INDEXED.with(|stack| {
        stack
            .borrow()
            .iter()
            .rev()
            .find(|(ptr, len, _)| *ptr == src.as_ptr() as usize && *len == src.len())
            .map(|(.., starts)| std::rc::Rc::clone(starts))
    });
    match registered {
        Some(starts) => f(&starts),
        None => f(&line_starts(src)),
    }
}

/// Where `src`'s lines start.
fn line_starts(src: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(src.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

thread_local! {
    /// The texts readers are reading now ([`indexed`]), by address and
    /// length, with where their lines start.
    static INDEXED: std::cell::RefCell<Vec<Registered>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A text being read: its address, its length and where its lines start.
type Registered = (usize, usize, std::rc::Rc<Vec<usize>>);

/// While it lives, diagnostics placed in `src` find its line starts by its
/// address: it borrows `src`, so the text at that address and length is
/// `src` and no other for as long.
pub(crate) struct Indexed<'a> {
    _src: std::marker::PhantomData<&'a str>,
}

/// Indexes `src`'s lines for the diagnostics of one reading of it.
pub(crate) fn indexed(src: &str) -> Indexed<'_> {
    let starts = std::rc::Rc::new(line_starts(src));
    INDEXED.with(|stack| stack.borrow_mut().push((src.as_ptr() as usize, src.len(), starts)));
    Indexed {
        _src: std::marker::PhantomData,
    }
}

impl Drop for Indexed<'_> {
    fn drop(&mut self) {
        INDEXED.with(|stack| stack.borrow_mut().pop());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_being_read_is_found_by_its_address_while_it_is_read() {
        let registered = || INDEXED.with(|stack| stack.borrow().len());
        let big = "[\n  A = 1;\n".repeat(1000) + "  é = x;\n]";
        {
            let _lines = indexed(&big);
            assert_eq!(registered(), 1);
            assert_eq!(line_col(&big, big.len() - 8), (2001, 3));
            let d = Diagnostic::warning_at(&big, 2, "w");
            assert_eq!((d.line, d.column), (2, 1));
            // A part of it, or another text, is placed the usual way.
            assert_eq!(line_col(&big[1..], 0), (1, 1));
        }
        // Once the reading is over, the same text is counted as any other.
        assert_eq!(registered(), 0);
        assert_eq!(line_col(&big, big.len() - 8), (2001, 3));
        assert_eq!(
            render_all(&[Diagnostic::error_at(&big, 3, "x")], "f", &big),
            Diagnostic::error_at(&big, 3, "x").render("f", &big)
        );
    }

    #[test]
    fn line_and_column_count_characters() {
        let src = "ab\ncé d";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 3), (2, 1));
        assert_eq!(line_col(src, 6), (2, 3));
        assert_eq!(line_col(src, 99), (2, 5));
    }

    #[test]
    fn render_points_at_the_column() {
        let src = "&(count = x)\n";
        let d = Diagnostic::error_at(src, 10, "expected an integer");
        assert_eq!(
            d.render("job.xrsl", src),
            "job.xrsl:1:11: error: expected an integer\n  |\n1 | &(count = x)\n  |           ^\n"
        );
    }
}
