//! Who may speak for whom: the identities (brokers) trusted to submit on
//! behalf of users, each with the users it may name in `On-Behalf-Of`.
//!
//! ```toml
//! [delegates]
//! broker = ["ann", "bob"]          # exactly these users
//! grid-portal = ["grid-*"]         # users whose name starts with `grid-`
//! department = ["*"]               # any well-formed name
//! ```
//!
//! The older list form, `delegates = ["broker"]`, lets each delegate speak
//! for any well-formed name; with `[accounts]` that is still only the users
//! who have an account there. Names match exactly, case included: `ANN` is
//! not `ann`. A name that is empty, longer than [`MAX_NAME`], padded with
//! spaces or holds control characters is never a user.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// The longest user name a delegate may give.
pub const MAX_NAME: usize = 256;

/// Each delegate's users, as patterns: a name, `*`, or a prefix ending in `*`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delegates(BTreeMap<String, Vec<String>>);

impl<'de> Deserialize<'de> for Delegates {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Anyone(Vec<String>),
            Named(BTreeMap<String, Vec<String>>),
        }
        Ok(match Form::deserialize(d)? {
            Form::Anyone(names) => Delegates(names.into_iter().map(|n| (n, vec!["*".to_string()])).collect()),
            Form::Named(map) => Delegates(map),
        })
    }
}

impl Delegates {
    /// Delegates that may each speak for any well-formed name (the list form).
    pub fn anyone(names: impl IntoIterator<Item = String>) -> Delegates {
        Delegates(names.into_iter().map(|n| (n, vec!["*".to_string()])).collect())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `who` is a delegate at all.
    pub fn contains(&self, who: &str) -> bool {
        self.0.contains_key(who)
    }

    /// Whether delegate `who` may speak for `user`; `Err` says why not, for
    /// a 403 (`who` is no delegate, the name is malformed, or it is not
    /// among the delegate's users).
    pub fn may_speak_for(&self, who: &str, user: &str) -> Result<(), String> {
        let Some(patterns) = self.0.get(who) else {
            return Err(format!(
                "{who} is not a delegate here, so it may not submit on behalf of another user"
            ));
        };
        well_formed(user)?;
        if patterns.iter().any(|p| matches(p, user)) {
            Ok(())
        } else {
            Err(format!(
                "delegate {who} may not speak for {user:?} (its users here: {})",
                patterns.join(", ")
            ))
        }
    }
}

/// Whether `user` can be a user's name at all.
fn well_formed(user: &str) -> Result<(), String> {
    if user.is_empty() {
        return Err("On-Behalf-Of names no user".into());
    }
    if user.len() > MAX_NAME {
        return Err(format!("On-Behalf-Of: a name of at most {MAX_NAME} bytes"));
    }
    if user.trim() != user || user.chars().any(char::is_control) {
        return Err(format!(
            "On-Behalf-Of: {user:?} is not a user's name (spaces around it or control characters)"
        ));
    }
    Ok(())
}

/// Whether `pattern` (a name, `*`, or a prefix ending in `*`) takes `user`.
fn matches(pattern: &str, user: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => user.starts_with(prefix),
        None => pattern == user,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named() -> Delegates {
        toml::from_str::<BTreeMap<String, Delegates>>(
            "d = { broker = [\"ann\", \"bob\"], portal = [\"grid-*\"], any = [\"*\"] }",
        )
        .unwrap()
        .remove("d")
        .unwrap()
    }

    #[test]
    fn a_delegate_speaks_only_for_its_own_users_exactly() {
        let d = named();
        assert!(d.may_speak_for("broker", "ann").is_ok());
        assert!(d.may_speak_for("broker", "bob").is_ok());
        for other in ["eve", "root", "ANN", "ann ", " ann", "an", "ann2", ""] {
            assert!(d.may_speak_for("broker", other).is_err(), "{other:?}");
        }
        assert!(d.may_speak_for("portal", "grid-7").is_ok());
        assert!(d.may_speak_for("portal", "grid").is_err());
        assert!(d.may_speak_for("ann", "bob").unwrap_err().contains("not a delegate"));
    }

    #[test]
    fn any_name_is_still_a_well_formed_one() {
        let d = named();
        assert!(d.may_speak_for("any", "ann").is_ok());
        assert!(d.may_speak_for("any", "/O=Grid/CN=Ann Smith").is_ok());
        for bad in ["", "a\nb", "\u{1b}[2J", " x", &"x".repeat(MAX_NAME + 1)] {
            assert!(d.may_speak_for("any", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_list_form_reads_as_anyone() {
        let d: BTreeMap<String, Delegates> = toml::from_str("d = [\"broker\"]").unwrap();
        assert_eq!(d["d"], Delegates::anyone(["broker".to_string()]));
        assert!(d["d"].may_speak_for("broker", "ann").is_ok());
    }
}
