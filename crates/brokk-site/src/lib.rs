//! Brokk's site agent (`brokk site`): what a resource owner runs in front of a
//! cluster. It decides reservations with the planner (the seeds' WS-Agreement
//! provider side and the VRM's active interface), places jobs without a
//! reservation at their earliest fit, runs jobs through the embedded backend
//! (real local processes in per-job sandboxes) or on a Slurm cluster, keeps
//! every record in SQLite, and serves the site API over HTTP.

pub mod accounts;
pub mod agent;
pub mod api;
pub mod arc;
pub mod backend;
pub mod config;
pub mod container;
pub mod containment;
pub mod delegates;
pub mod gram;
pub mod gridcopy;
pub mod launch;
pub mod listener;
pub mod metrics;
pub mod reachability;
pub mod runner;
pub mod sandbox;
pub mod slurm;
pub mod staging;
pub mod store;
pub mod supervisor;
pub mod uploads;

use std::net::SocketAddr;

pub use agent::{Agent, AgentError};
pub use config::{Config, ConfigError};

/// A running agent: where it listens, and the task serving it.
#[derive(Debug)]
pub struct Running {
    /// The bound address (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    /// The agent itself.
    pub agent: Agent,
    /// The server task; it runs until the process ends.
    pub server: tokio::task::JoinHandle<()>,
}

/// Opens the agent's database, resumes its unfinished jobs, starts the hold
/// expiry ticker and serves the API on `config.listen`.
pub async fn start(config: Config) -> Result<Running, AgentError> {
    let listen = config.listen;
    tracing::info!(site = %config.name, "{}", containment::notice(&config));
    let descriptors = listener::descriptor_budget().map_err(AgentError::Internal)?;
    let (agent, resume) = Agent::open(config).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| AgentError::Internal(format!("listening on {listen}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| AgentError::Internal(e.to_string()))?;
    if let Some(slurm) = agent.slurm() {
        tokio::spawn(slurm.clone().poll(agent.clone()));
    }
    if let Some(ce) = agent.backend().arc() {
        tokio::spawn(ce.clone().watch());
    }
    if let Some(g) = agent.backend().gram() {
        tokio::spawn(g.clone().watch());
    }
    for id in resume {
        tokio::spawn(runner::run(agent.clone(), id, true));
    }
    let ticker = agent.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(500));
        loop {
            every.tick().await;
            if let Err(e) = ticker.expire().await {
                tracing::error!("expiring holds: {e}");
            }
        }
    });
    let sweeper = agent.clone();
    tokio::spawn(async move {
        // Uploads no unfinished job needs go after their retention, looked
        // for as often as that (at most hourly, at least every second).
        let retention = std::time::Duration::from_secs(sweeper.config().upload_retention_s);
        let mut every = tokio::time::interval(
            retention.clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(3600)),
        );
        loop {
            every.tick().await;
            let gone = sweeper.sweep_uploads().await;
            if gone > 0 {
                tracing::info!("removed {gone} uploads past their retention");
            }
        }
    });
    let app = api::router(agent.clone());
    let server = tokio::spawn(listener::serve(
        listener,
        app,
        listener::Bounds::for_descriptors(descriptors),
    ));
    tracing::info!(%addr, "site agent listening");
    Ok(Running { addr, agent, server })
}
