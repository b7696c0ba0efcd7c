//! Anonymous LDAP reads of GLUE 2 (ARC's information system, `o=glue` on
//! port 2135): a CE's own information, and the endpoints a broker's
//! discovery lists.

use std::collections::BTreeMap;

use ldap3::{LdapConnAsync, Scope, SearchEntry};

/// One entry's attributes, names in lower case, and its DN under `dn`.
pub type Entry = BTreeMap<String, Vec<String>>;

/// The entries under `base` at `url` matching `filter`, with `attributes`.
pub async fn search(url: &str, base: &str, filter: &str, attributes: &[&str]) -> Result<Vec<Entry>, String> {
    let fail = |e: ldap3::LdapError| format!("{url}: {e}");
    let (conn, mut ldap) = LdapConnAsync::new(url).await.map_err(fail)?;
    ldap3::drive!(conn);
    let (entries, _) = ldap
        .search(base, Scope::Subtree, filter, attributes.to_vec())
        .await
        .map_err(fail)?
        .success()
        .map_err(fail)?;
    let _ = ldap.unbind().await;
    Ok(entries
        .into_iter()
        .map(|e| {
            let e = SearchEntry::construct(e);
            let mut attrs: Entry = e.attrs.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
            attrs.insert("dn".into(), vec![e.dn]);
            attrs
        })
        .collect())
}
