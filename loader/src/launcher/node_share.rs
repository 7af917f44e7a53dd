//! [`NodeShare`]: this process's fair share of the node's cores and memory, what the
//! loader's `workers` and `pinned_memory` defaults are sized from.

use super::env::Launcher;
use super::placement::Placement;

/// This process's share of the node: what the loader's defaults are sized from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeShare {
    /// Cores for this process's loader threads (`≥ 1`).
    pub cores: usize,
    /// Page-locked (pinned) host memory this process's staging may take, bytes.
    pub pinned_bytes: u64,
}

impl NodeShare {
    /// The share of one of `local_world` processes on a machine where this process
    /// may run on `available_cores` cores (its affinity and CPU quota) and which has
    /// `memory_bytes` of memory:
    ///
    /// - cores: `available_cores / local_world`, at least 1; except when the
    ///   launcher gave each process CPUs of its own: `cpus_per_task` (Slurm's
    ///   `SLURM_CPUS_PER_TASK`) is set and this process may run on no more than
    ///   that many cores, which are then its share as they are (dividing them again
    ///   would leave most of them idle). Without such a statement the available
    ///   cores are taken to be shared: a container's quota or cpuset looks the same
    ///   from inside as a per-process binding, and dividing a binding by mistake
    ///   costs less than oversubscribing a shared set `local_world` times.
    /// - pinned memory: half the memory divided by `local_world` (the other half is
    ///   the training processes', the page cache's and the system's).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::launcher::NodeShare;
    /// const GIB: u64 = 1 << 30;
    /// // 8 torchrun processes on a 16-core, 128 GiB node: 2 cores, 8 GiB each.
    /// let s = NodeShare::new(16, 128 * GIB, 8, None);
    /// assert_eq!((s.cores, s.pinned_bytes), (2, 8 * GIB));
    /// // 8 processes on 2 cores: at least one thread each.
    /// assert_eq!(NodeShare::new(2, 8 * GIB, 8, None).cores, 1);
    /// // srun --cpus-per-task=2 bound each of the 8 tasks to 2 cores of its own.
    /// assert_eq!(NodeShare::new(2, 128 * GIB, 8, Some(2)).cores, 2);
    /// // ... without binding, every task sees the 16 cores: they are shared.
    /// assert_eq!(NodeShare::new(16, 128 * GIB, 8, Some(2)).cores, 2);
    /// // Alone: every core.
    /// assert_eq!(NodeShare::new(16, 128 * GIB, 1, None).cores, 16);
    /// ```
    pub fn new(
        available_cores: usize,
        memory_bytes: u64,
        local_world: u64,
        cpus_per_task: Option<u64>,
    ) -> Self {
        let procs = local_world.max(1);
        let available = available_cores.max(1) as u64;
        let own_cpus = cpus_per_task.is_some_and(|c| available <= c);
        let cores = if own_cpus {
            available
        } else {
            (available / procs).max(1)
        };
        NodeShare {
            cores: cores as usize,
            pinned_bytes: memory_bytes / 2 / procs,
        }
    }

    /// The share of the process at `placement` on this machine: available cores
    /// from [`std::thread::available_parallelism`], memory from `/proc/meminfo` or a
    /// lower cgroup limit (when it cannot be read the pinned share is unlimited), and,
    /// under Slurm, `SLURM_CPUS_PER_TASK`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::launcher::{NodeShare, Placement};
    /// let share = NodeShare::of_this_machine(&Placement::single());
    /// assert!(share.cores >= 1);
    /// ```
    pub fn of_this_machine(placement: &Placement) -> Self {
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory = super::memory::memory_total().unwrap_or(u64::MAX);
        // Only Slurm's own tasks: a torchrun started inside one task shares its CPUs.
        let cpus_per_task = match placement.launcher {
            Launcher::Slurm => std::env::var("SLURM_CPUS_PER_TASK")
                .ok()
                .and_then(|v| v.trim().parse().ok()),
            _ => None,
        };
        NodeShare::new(available, memory, placement.local_world, cpus_per_task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_share_divides_cores_and_memory_by_the_local_processes() {
        const GIB: u64 = 1 << 30;
        // The cores of every local process add up to the machine's (min 1 each).
        for cores in [1usize, 2, 3, 8, 16, 96] {
            for procs in [1u64, 2, 3, 4, 8] {
                let share = NodeShare::new(cores, 64 * GIB, procs, None);
                let total = share.cores * procs as usize;
                assert!(share.cores >= 1);
                assert!(
                    total <= cores.max(procs as usize),
                    "{cores} cores, {procs} procs: {total}"
                );
                assert!(
                    total > cores.saturating_sub(procs as usize),
                    "{cores} cores, {procs} procs: only {total} used"
                );
                assert_eq!(share.pinned_bytes, 32 * GIB / procs);
            }
        }
        // A quota or cpuset of 16 cores shared by 8 processes (a container).
        assert_eq!(NodeShare::new(16, 64 * GIB, 8, None).cores, 2);
        // Slurm tasks bound to 4 cores each (--cpus-per-task=4): not divided again.
        assert_eq!(NodeShare::new(4, 64 * GIB, 8, Some(4)).cores, 4);
        // Local world 0 never divides by zero.
        assert_eq!(NodeShare::new(4, 8 * GIB, 0, None).cores, 4);
    }
}
