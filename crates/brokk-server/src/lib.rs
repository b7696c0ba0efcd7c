//! Brokk's broker service (`brokk serve`), the seeds' JobSubmissionService:
//! users send jobs in their own language, the service stores them, brokers
//! them over its sites with the broker core ([ET-brokering]'s Algorithm 1) and
//! follows them to the end. Sites are remote `brokk site` agents or embedded
//! ones the service starts in-process.

// The OpenAPI document is one `json!` literal, deeper than the default limit.
#![recursion_limit = "256"]

pub mod api;
pub mod config;
pub mod dashboard;
pub mod db;
pub mod discovery;
pub mod lease;
pub mod record;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;

pub use config::Config;
use service::{Counters, Service, SiteEntry, SiteInfo};

/// The service failed to start.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(String);

/// A running service.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The service.
    pub service: Service,
    /// The HTTP server task.
    pub server: tokio::task::JoinHandle<()>,
}

/// Starts embedded sites, opens the database, resumes dispatch and polling
/// and serves the client API.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let err = |e: &dyn std::fmt::Display| StartError(e.to_string());
    let descriptors = brokk_site::listener::descriptor_budget().map_err(|e| err(&e))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| err(&format!("listening on {}: {e}", config.listen)))?;
    let mut bounds = brokk_site::listener::Bounds::for_descriptors(descriptors);
    bounds.connections = config.limits.connections.unwrap_or(bounds.connections);
    bounds.per_client = config.limits.connections_per_client.unwrap_or(bounds.per_client);
    // With a standby configured, nothing starts before the lease is ours:
    // the listener answers as the standby until then.
    let listener = match &config.standby {
        Some(standby) => {
            let lease = lease::Lease::open(
                &config.database,
                &standby.url,
                std::time::Duration::from_secs(standby.lease_s),
            )
            .await
            .map_err(|e| err(&e))?;
            let shared = listener.into_std().map_err(|e| err(&e))?;
            let answering = shared.try_clone().map_err(|e| err(&e))?;
            let answering = tokio::net::TcpListener::from_std(answering).map_err(|e| err(&e))?;
            lease::wait_as_standby(&lease, answering, bounds)
                .await
                .map_err(|e| err(&e))?;
            let listener = tokio::net::TcpListener::from_std(shared).map_err(|e| err(&e))?;
            // Renewed from now on, through the start: a broker that loses
            // it stops at once, not a moment beside its successor.
            tokio::spawn(async move {
                let why = lease::keep(lease).await;
                tracing::error!("stopping: {why}");
                std::process::exit(3);
            });
            listener
        }
        None => listener,
    };
    let db = db::Db::open(&config.database).await.map_err(|e| err(&e))?;
    db.outputs_stay_at(config.embedded.iter().map(|e| e.name.clone()));
    let inherited = db
        .in_states(&[
            brokk_broker::jobs::BrokerState::Accepted,
            brokk_broker::jobs::BrokerState::Reserving,
        ])
        .await
        .map_err(|e| err(&e))?
        .into_iter()
        .map(|j| j.view.id)
        .collect();
    // (name, url, token) of every site; the blocking clients are made on a
    // blocking thread, as reqwest requires.
    let mut endpoints: Vec<(String, String, String)> = config
        .sites
        .iter()
        .map(|s| (s.name.clone(), s.url.clone(), s.token.clone()))
        .collect();
    for e in &config.embedded {
        endpoints.push(start_embedded(&config, e).await?);
    }
    let sites = entries(endpoints).await?;
    let network = service::network(sites.len(), config.workflows.bandwidth_bytes_per_s, service::now())
        .map_err(|e| err(&format!("[workflows]: {e}")))?;
    let record = match &config.record {
        Some(path) => Some(Arc::new(record::Recorder::open(path).map_err(|e| err(&e))?)),
        None => None,
    };
    let core = brokk_broker::broker::BrokerCore::new(
        sites.iter().map(|s| s.name.clone()).collect(),
        brokk_broker::broker::BrokerParams {
            // The core's clock counts seconds: a time-to-live of part of
            // one is a second.
            info_ttl: brokk_model::Duration(config.info_ttl_ms.div_ceil(1000) as i64),
            retry_after: brokk_model::Duration(1),
            adapt_margin: brokk_model::Duration(config.adapt_margin),
            rescue: config.rescue.map(|r| r.params()),
            ..brokk_broker::broker::BrokerParams::default()
        },
    );
    let mut core = core;
    core.delegate(brokk_broker::broker::Delegating {
        name: config.name.clone(),
        threshold: brokk_model::Duration(config.delegation.threshold_s.max(0)),
        ttl: config.delegation.ttl,
        // The configured remote sites come first, in their order.
        neighbours: config
            .sites
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.neighbour.map(|r| (k, r)))
            .collect(),
    });
    let core = Arc::new(std::sync::Mutex::new(core));
    let counters = Arc::new(Counters::default());
    let neighbours = config
        .sites
        .iter()
        .filter(|s| s.neighbour.is_some())
        .map(|s| s.name.clone())
        .collect();
    let service = Service {
        broker: Arc::new(service::Broker::start(
            core.clone(),
            db.clone(),
            record.clone(),
            counters.clone(),
        )),
        db,
        sites: Arc::new(std::sync::RwLock::new(Arc::new(sites))),
        info: Arc::new(SiteInfo::new(
            config.info_ttl_ms == 0,
            brokk_broker::info::FetchOptions::default(),
            core,
        )),
        counters,
        per_site: Arc::default(),
        wake: Arc::new(tokio::sync::Notify::new()),
        inherited: Arc::new(std::sync::Mutex::new(inherited)),
        limits: config.limits,
        uploads: brokk_site::uploads::Uploads::new(config.state_dir.join("uploads"), config.limits.upload_bytes)
            .with_quota(brokk_site::uploads::Quota {
                bytes: config.limits.upload_quota_bytes,
                files: config.limits.upload_quota_files,
            }),
        outputs: brokk_site::uploads::Uploads::new(config.state_dir.join("outputs"), config.limits.output_quota_bytes)
            .with_quota(brokk_site::uploads::Quota {
                bytes: config.limits.output_quota_bytes,
                files: config.limits.output_quota_files,
            }),
        record,
        network: Arc::new(std::sync::Mutex::new(network)),
        workflow_settings: config.workflows,
        workflow_lock: Arc::new(tokio::sync::Mutex::new(())),
        admissions: Arc::default(),
        holds: service::HoldJournal::new(config.state_dir.join("admissions")),
        parsing: Arc::new(service::parsing::Parsing::new(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )),
        unreachable: Arc::default(),
        neighbours: Arc::new(neighbours),
    };
    let adopted = service.adopt_unfinished().await.map_err(|e| err(&e))?;
    tracing::debug!("the broker core follows {adopted} jobs recorded before this start");
    service.restore_network().await.map_err(|e| err(&e))?;
    let given_back = service.release_core_holds().await.map_err(|e| err(&e))?;
    if given_back > 0 {
        tracing::info!("gave back {given_back} holds the broker had for jobs it had not sent before it stopped");
    }
    let released = service.release_stray_holds().await.map_err(|e| err(&e))?;
    if released > 0 {
        tracing::info!("let go of {released} holds of workflow admissions a stop interrupted");
    }
    if let Some(d) = config.discovery.clone() {
        // The first reading before the service answers, so the sites found
        // are there for its first user; then at the interval.
        discover(&service, &config, &d).await;
        let (s, c) = (service.clone(), config.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(d.interval_s));
            every.tick().await;
            loop {
                every.tick().await;
                discover(&s, &c, &d).await;
            }
        });
    }
    // Before anything is dispatched; a site that does not answer yet is
    // asked again until it does (the jobs stay invisible to dispatch meanwhile).
    let r = service.clone();
    tokio::spawn(async move {
        while let Err(e) = r.recover_coallocations().await {
            tracing::warn!("undoing co-allocations a stop interrupted: {e}");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    let a = service.clone();
    let every = std::time::Duration::from_secs(config.adapt_every.max(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if let Err(e) = a.adapt_round().await {
                tracing::error!("adapting queues: {e}");
            }
        }
    });
    // The dispatcher: on every submission and every ended workflow task,
    // and every second for retries and for jobs accepted before a restart.
    // Workflows move first, so a task their round released goes at once.
    let d = service.clone();
    tokio::spawn(async move {
        loop {
            if let Err(e) = d.rescue_round().await {
                tracing::error!("rescuing work from sites that do not answer: {e}");
            }
            if let Err(e) = d.advance_workflows().await {
                tracing::error!("advancing workflows: {e}");
            }
            if let Err(e) = d.dispatch_pending().await {
                tracing::error!("dispatching: {e}");
            }
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), d.wake.notified()).await;
        }
    });
    // Uploads no unfinished job needs go after their retention.
    let u = service.clone();
    sweep_every(config.limits.upload_retention_s, move |kept_for| {
        let u = u.clone();
        async move {
            u.sweep_uploads(kept_for)
                .await
                .map_err(|e| format!("deleting old uploads: {e}"))
        }
    });
    // The outputs of ended jobs, kept from their sites as they end; those
    // past their retention deleted.
    let k = service.clone();
    tokio::spawn(async move {
        loop {
            match k.keep_outputs().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => tracing::warn!("keeping ended jobs' outputs: {e}"),
            }
            // At once when a job ends; a site asked again when it is due.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), k.db.keep_due()).await;
        }
    });
    let o = service.clone();
    sweep_every(config.limits.output_retention_s, move |kept_for| {
        let o = o.clone();
        async move {
            o.sweep_outputs(kept_for)
                .await
                .map_err(|e| format!("deleting old kept outputs: {e}"))
        }
    });
    // Sites that push their information, each followed by a task of its own.
    for s in config.sites.iter() {
        if let Some(every) = s.push_every_s {
            let (f, name, url, token) = (service.clone(), s.name.clone(), s.url.clone(), s.token.clone());
            tokio::spawn(async move { f.follow_pushes(name, url, token, every).await });
        }
    }
    let p = service.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(250));
        loop {
            every.tick().await;
            if let Err(e) = p.poll().await {
                tracing::error!("polling sites: {e}");
            }
        }
    });
    let addr = listener.local_addr().map_err(|e| err(&e))?;
    let app = api::router(
        service.clone(),
        api::Access {
            tokens: config.tokens.clone(),
            delegates: config.delegates.clone(),
            name: config.name.clone(),
            event_streams: config.limits.event_streams,
        },
        config.max_body_bytes,
    );
    let server = tokio::spawn(brokk_site::listener::serve(listener, app, bounds));
    Ok(Running { addr, service, server })
}

/// Runs `sweep` with the retention of `retention_s` seconds as often as
/// that (at least every hour, at most every second) on a task of its own;
/// what fails is logged and tried again at the next turn.
fn sweep_every<F, Fut>(retention_s: u64, sweep: F)
where
    F: Fn(std::time::Duration) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<usize, String>> + Send,
{
    let retention = std::time::Duration::from_secs(retention_s);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(
            retention.clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(3600)),
        );
        loop {
            every.tick().await;
            if let Err(e) = sweep(retention).await {
                tracing::warn!("{e}");
            }
        }
    });
}

/// The site agent settings of embedded site `e`, its state under the
/// broker's `state_dir`, reached with `token`.
fn embedded_agent(config: &Config, e: &config::EmbeddedSiteConfig, token: &str) -> brokk_site::Config {
    let dir = config.state_dir.join(&e.name);
    brokk_site::Config {
        name: e.name.clone(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        capacity: e.capacity,
        database: dir.join("site.db"),
        workdir: dir.join("jobs"),
        horizon_days: 365,
        default_wall_time: 3600,
        policy: e.policy.clone(),
        order: e.order.clone(),
        kill_grace: 5,
        min_job_age_s: e.min_job_age_s,
        job_processes: e.job_processes,
        max_body_bytes: 1 << 20,
        max_upload_bytes: config.limits.upload_bytes,
        // The broker alone uploads here, for all its users, whose quotas it
        // keeps itself.
        upload_quota_bytes: u64::MAX,
        upload_quota_files: u64::MAX,
        upload_retention_s: config.limits.upload_retention_s,
        benchmarks: e.benchmarks.clone(),
        bandwidth_bytes_per_s: e.bandwidth_bytes_per_s,
        tokens: [(token.to_string(), "broker".to_string())].into_iter().collect(),
        accounts: e.accounts.clone(),
        delegates: brokk_site::delegates::Delegates::anyone(["broker".to_string()]),
        stage_in_dirs: e.stage_in_dirs.clone(),
        stage_out_dirs: e.stage_out_dirs.clone(),
        stage_hosts: e.stage_hosts.clone(),
        transfers: e.transfers.clone(),
        containers: e.containers.clone(),
        slurm: e.slurm.clone(),
        arc: e.arc.clone(),
        gram: e.gram.clone(),
        null_backend_for_benchmarks: e.null_backend_for_benchmarks,
        capabilities: e.capabilities.clone(),
    }
}

/// Starts embedded site `e`; returns its name, URL and the broker's token.
async fn start_embedded(
    config: &Config,
    e: &config::EmbeddedSiteConfig,
) -> Result<(String, String, String), StartError> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let site = embedded_agent(config, e, &token);
    site.check().map_err(|e| StartError(e.to_string()))?;
    if !e.accounts.is_empty() {
        // The broker made these private (umask 077); job accounts must pass
        // through them to their sandboxes, without listing them.
        let dir = config.state_dir.join(&e.name);
        std::fs::create_dir_all(&dir).map_err(|err| StartError(format!("{}: {err}", dir.display())))?;
        for d in [config.state_dir.as_path(), dir.as_path()] {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(d).map(|m| m.permissions().mode()).unwrap_or(0o700);
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o011))
                .map_err(|err| StartError(format!("{}: {err}", d.display())))?;
        }
    }
    let running = brokk_site::start(site).await.map_err(|e| StartError(e.to_string()))?;
    Ok((e.name.clone(), format!("http://{}", running.addr), token))
}

/// The site entries for (name, url, token) triples; the blocking clients are
/// made on a blocking thread, as reqwest requires.
async fn entries(endpoints: Vec<(String, String, String)>) -> Result<Vec<SiteEntry>, StartError> {
    tokio::task::spawn_blocking(move || {
        endpoints
            .into_iter()
            .map(|(name, url, token)| SiteEntry::new(name, brokk_proto::RemoteSite::new(&url, &token)))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| StartError(e.to_string()))
}

/// One reading of the GLUE 2 listing: every ARC REST endpoint not yet a site
/// becomes one, all connected to at once, each within the timeout; those
/// that do not answer are reported (`brokk resources` lists them
/// unavailable, with why) and asked again at the next reading.
async fn discover(service: &Service, config: &Config, d: &discovery::DiscoveryConfig) {
    let timeout = std::time::Duration::from_secs(d.timeout_s);
    let found = match tokio::time::timeout(timeout, discovery::listing(d)).await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return tracing::warn!("reading the GLUE 2 listing: {e}"),
        Err(_) => return tracing::warn!("reading the GLUE 2 listing: no answer within {} s", d.timeout_s),
    };
    let known: std::collections::BTreeSet<String> = service.sites().iter().map(|s| s.name.clone()).collect();
    let new: Vec<(String, config::EmbeddedSiteConfig)> = found
        .iter()
        .filter(|ep| !known.contains(&ep.site_name()))
        .map(|ep| {
            let mut arc = d.arc.clone();
            arc.url = ep.url.clone();
            let site = config::EmbeddedSiteConfig::arc(ep.site_name(), arc);
            (ep.url.clone(), site)
        })
        .collect();
    let tries = new.iter().map(|(url, site)| async move {
        let r = match tokio::time::timeout(timeout, start_embedded(config, site)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {} s", d.timeout_s)),
        };
        (url.clone(), site.name.clone(), r)
    });
    let mut started = Vec::new();
    let mut unreachable = Vec::new();
    for (url, name, r) in futures_util::future::join_all(tries).await {
        match r {
            Ok(e) => {
                tracing::info!(site = %name, "discovered {url}");
                started.push(e);
            }
            Err(why) => {
                tracing::warn!(site = %name, "discovered {url}, which does not answer; skipped: {why}");
                unreachable.push((name, format!("discovered at {url}, not reachable: {why}")));
            }
        }
    }
    service.set_unreachable(unreachable);
    match entries(started).await {
        Ok(sites) => {
            if let Err(e) = service.add_sites(sites).await {
                tracing::error!("adding discovered sites: {e}");
            }
        }
        Err(e) => tracing::error!("adding discovered sites: {e}"),
    }
}
