//! Sites that push their information ([AB-avail]'s publication): a task per
//! subscribed site follows its `/v1/info/stream`, and each event is the
//! site's answer, as if the broker had asked; while the stream is up the
//! core does not ask the site ([`brokk_broker::broker::BrokerCore::pushed`]).

use brokk_broker::info::FetchFailure;
use brokk_proto::wire::InfoView;

use super::*;

/// How long a stream may stay silent before it is taken for dead: the
/// agent sends a keep-alive every 10 s.
const SILENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The most an event may hold before the stream is taken for broken.
const EVENT_BYTES: usize = 4 << 20;

/// The longest wait before subscribing again after a failure.
const BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

impl Service {
    /// Follows what site `name` (an agent at `url`, where the broker's
    /// token is `token`) pushes, at least every `every` seconds, for as
    /// long as the service runs: subscribed again after a failure, the
    /// site asked meanwhile.
    pub async fn follow_pushes(&self, name: String, url: String, token: String, every: u64) {
        let http = match reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
        {
            Ok(h) => h,
            Err(e) => return tracing::error!(site = %name, "subscribing: {e}"),
        };
        let stream = format!("{}/v1/info/stream?every={every}", url.trim_end_matches('/'));
        let mut backoff = std::time::Duration::from_secs(1);
        loop {
            match self.subscribed(&http, &name, &url, &stream, &token).await {
                Ok(()) => backoff = std::time::Duration::from_secs(1),
                Err(why) => tracing::warn!(site = %name, "its pushed information: {why}"),
            }
            self.info.pushed(&name, None, now());
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// One subscription, until it ends (`Ok` when the site closed it).
    async fn subscribed(
        &self,
        http: &reqwest::Client,
        name: &str,
        endpoint: &str,
        stream: &str,
        token: &str,
    ) -> Result<(), String> {
        use futures_util::StreamExt;
        let resp = http
            .get(stream)
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{stream}: {}", resp.status()));
        }
        let mut body = resp.bytes_stream();
        let mut text = String::new();
        loop {
            let chunk = match tokio::time::timeout(SILENCE, body.next()).await {
                Err(_) => return Err(format!("nothing for {} s", SILENCE.as_secs())),
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(Some(Ok(chunk))) => chunk,
            };
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                if let Some(data) = info_event(&event) {
                    let answer = match serde_json::from_str::<InfoView>(&data) {
                        Ok(v) if v.available => Ok(brokk_proto::client::resource_info(endpoint, v)),
                        Ok(v) => Err(FetchFailure::Error(brokk_broker::SiteError::Unavailable(format!(
                            "{endpoint}: {}",
                            v.unavailable_reason.unwrap_or_else(|| "unavailable".into())
                        )))),
                        Err(e) => return Err(format!("a pushed event does not read: {e}")),
                    };
                    self.info.pushed(name, Some(&answer), now());
                    self.counters.info_pushes.fetch_add(1, Ordering::Relaxed);
                    self.wake.notify_one();
                }
            }
            if text.len() > EVENT_BYTES {
                return Err(format!("an event longer than {EVENT_BYTES} bytes"));
            }
        }
    }
}

/// The data of a server-sent event named `info` (its `data:` lines
/// joined), or `None` for any other event or a keep-alive comment.
fn info_event(event: &str) -> Option<String> {
    let mut named = false;
    let mut data: Vec<&str> = Vec::new();
    for line in event.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            named = v.trim() == "info";
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (named && !data.is_empty()).then(|| data.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::info_event;

    #[test]
    fn an_info_event_is_read_and_others_are_not() {
        assert_eq!(
            info_event("event: info\ndata: {\"a\": 1}\n\n").as_deref(),
            Some("{\"a\": 1}")
        );
        assert_eq!(info_event("event:info\ndata:x\ndata: y\n").as_deref(), Some("x\ny"));
        assert_eq!(info_event(": keep-alive\n\n"), None);
        assert_eq!(info_event("event: other\ndata: x\n\n"), None);
        assert_eq!(info_event("data: x\n\n"), None);
    }
}
