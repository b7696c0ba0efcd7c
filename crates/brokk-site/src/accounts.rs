//! Local Unix accounts for the site's users, as ARC's and GRAM's
//! grid-mapfiles map grid identities: each job runs as the account its user
//! maps to, its sandbox owned by that account.

use std::collections::BTreeMap;

use crate::config::Config;

/// A local account a job runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    /// Its user id.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
}

/// The configuration's account map, resolved when the agent starts.
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    map: BTreeMap<String, Account>,
}

impl Accounts {
    /// Looks every account up; refuses a map the agent cannot honour (an
    /// unknown account, or other accounts while the agent is not root).
    pub fn resolve(config: &Config) -> Result<Accounts, String> {
        let me = nix::unistd::geteuid();
        let mut map = BTreeMap::new();
        for (user, name) in &config.accounts {
            let found = nix::unistd::User::from_name(name)
                .map_err(|e| format!("accounts: looking up `{name}`: {e}"))?
                .ok_or_else(|| format!("accounts: `{user}` maps to `{name}`, which is not an account here"))?;
            if !me.is_root() && found.uid != me {
                return Err(format!(
                    "accounts: the agent runs as uid {me}, not root, so it cannot run jobs as `{name}`; \
                     run it as root or leave [accounts] out"
                ));
            }
            map.insert(
                user.clone(),
                Account {
                    uid: found.uid.as_raw(),
                    gid: found.gid.as_raw(),
                },
            );
        }
        Ok(Accounts { map })
    }

    /// The account `user`'s jobs run as: `Ok(None)` (the agent's own) when
    /// no map is configured; an error sentence when one is and `user` has no
    /// account in it.
    pub fn of(&self, user: &str) -> Result<Option<Account>, String> {
        if self.map.is_empty() {
            return Ok(None);
        }
        self.map
            .get(user)
            .copied()
            .map(Some)
            .ok_or_else(|| format!("{user} has no local account at this site"))
    }
}

/// Refuses a work directory that the job accounts cannot reach: every
/// directory above it must let others pass (`x`), or each job fails with
/// "Permission denied" on its own sandbox.
pub fn traversable(workdir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::path::absolute(workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
    for d in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(d)
            .map_err(|e| format!("{}: {e}", d.display()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "accounts: the job accounts cannot reach the work directory {}: {} is mode {:o}; \
                 let them through with `chmod o+x {}` (0711 lists nothing to them)",
                dir.display(),
                d.display(),
                mode & 0o7777,
                d.display()
            ));
        }
    }
    Ok(())
}

/// What the agent says when it starts without keeping users apart: every
/// job of every identity runs as the agent's own account.
pub fn shared_account_notice(config: &Config) -> Option<String> {
    let identities: std::collections::BTreeSet<&String> = config.tokens.values().collect();
    if !config.accounts.is_empty() || (identities.len() <= 1 && config.delegates.is_empty()) {
        return None;
    }
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| nix::unistd::geteuid().to_string(), |u| u.name);
    Some(format!(
        "users are not kept apart: every job runs as this agent's account ({me}); \
         map identities to accounts in [accounts] and run the agent as root to run each as its own"
    ))
}
