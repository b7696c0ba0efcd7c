//! The benchmark-only backend: no process, no sandbox use; the job runs for
//! no time at its planned start.

use crate::launch::{start_when_due, End, Launch, Progress};

pub(crate) async fn run<P: Progress>(site: &P, mut launch: Launch) -> End {
    if !start_when_due(site, launch.id, &mut launch.controls).await {
        return End::Cancelled;
    }
    End::Exited(0)
}
