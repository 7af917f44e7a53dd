//! Which process of which job this is, read once from the launcher's environment
//! (torchrun, Horovod, Open MPI, MPICH, Slurm, else a single process; the order and
//! the variables: [`Placement::from_vars`]) into a [`Placement`]; the GPU
//! [`crate::Device::Auto`] takes for it ([`choose_device`]); and this process's fair
//! share of the node's cores and memory ([`NodeShare`]).
//!
//! Everything here is a pure function of its inputs (an environment lookup, a
//! device count, core and memory figures), so tests can play any launcher and any
//! machine; [`Placement::from_env`] and [`NodeShare::of_this_machine`] are the thin
//! wrappers over the real process environment and machine.
//!
//! # Why the loader reads the launcher itself
//!
//! On a node with eight GPUs a job runs eight processes (torchrun, or `srun` with
//! one task per GPU). Each loader must load its own slice of every epoch (rank and
//! world), decode on the GPU its training step uses (local rank), and leave the
//! other seven processes their share of the cores and of the page-locked memory
//! (local world size). A loader that behaves as if it were alone loads the whole
//! dataset, decodes on GPU 0, and starts one worker per core in every process.
//!
//! # Examples
//!
//! ```
//! use std::collections::HashMap;
//! use stoker_loader::launcher::{choose_device, Launcher, Placement};
//! use stoker_loader::Device;
//!
//! // What torchrun sets for the fourth process of the second 8-GPU node.
//! let env: HashMap<&str, &str> = [
//!     ("RANK", "11"), ("WORLD_SIZE", "16"), ("LOCAL_RANK", "3"), ("LOCAL_WORLD_SIZE", "8"),
//! ].into();
//! let p = Placement::from_vars(|name| env.get(name).map(|v| v.to_string()))?;
//! assert_eq!((p.launcher, p.rank, p.world, p.local_rank, p.local_world),
//!            (Launcher::Torchrun, 11, 16, 3, 8));
//! // Device::Auto on a node where the driver reports 8 GPUs: the local rank's.
//! assert_eq!(choose_device(Device::Auto, p.local_rank, || 8), Device::Cuda(3));
//! // An explicit device always wins.
//! assert_eq!(choose_device(Device::Cuda(0), p.local_rank, || 8), Device::Cuda(0));
//! # Ok::<(), stoker_loader::LoaderError>(())

mod device;
mod env;
mod memory;
mod mpi;
mod node_share;
mod placement;
mod slurm;
mod torchrun;
mod vars;

pub use device::choose_device;
pub(crate) use env::list_vars;
pub use env::{EnvProblem, EnvVar, Launcher};
pub use memory::memory_total;
pub(crate) use memory::{memory_in_use, rings_note};
pub use node_share::NodeShare;
pub use placement::Placement;
pub use slurm::tasks_on_node;
