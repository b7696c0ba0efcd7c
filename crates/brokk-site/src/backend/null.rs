//! The benchmark-only backend: no process, no sandbox use; the job runs for
//! no time at its planned start.

use brokk_model::JobPhase;

use crate::launch::{wait_for_start, End, Launch, Progress};

pub(crate) async fn run<P: Progress>(site: &P, mut launch: Launch) -> End {
    if !wait_for_start(&mut launch.controls).await || !site.set_phase(launch.id, JobPhase::Running).await {
        return End::Cancelled;
    }
    End::Exited(0)
}
