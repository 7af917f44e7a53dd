//! What a loader warns of at build ([`crate::LoaderBuilder::build`] logs each): settings
//! that leave every epoch empty, a launcher's processes all reading the whole dataset,
//! more workers than cores, batches in flight that may not fit in memory.

use super::Loader;
use crate::builder::cpu_ring;

#[cfg(doc)]
use crate::LoaderBuilder;

impl Loader {
    /// Why a [`crate::Device::Auto`] loader runs on the CPU although the driver reports a
    /// GPU, when it does: the GPU could not be used (nvJPEG or NVRTC missing, its memory
    /// taken); a training run would go on many times slower without a word. A machine
    /// without a GPU falls back as expected, without a note (it is only logged, at info
    /// level). The builder also logs it as a warning.
    pub fn gpu_fallback_note(&self) -> Option<String> {
        self.config.gpu_fallback.clone()
    }

    /// Why this loader reads the whole dataset although the launcher started several
    /// processes, when it does: built without [`LoaderBuilder::distributed_from_env`]
    /// under torchrun, Slurm or MPI, every process would load the same batches in the
    /// same order. Not for `distributed(_, 1)`, which asks for that (the error of a
    /// Python loader that disagrees with `torch.distributed` offers it). The builder
    /// also logs it as a warning.
    pub fn ranks_note(&self) -> Option<String> {
        let placement = &self.config.placement;
        let whole = self.config.world == 1 && !self.config.ranks_given;
        (whole && placement.world > 1).then(|| {
            format!(
                "the launcher ({}) started {} processes, but this loader reads the whole \
                 dataset as one: every process gets the same batches; call \
                 .distributed_from_env() (or .distributed(rank, world); Python: leave out \
                 rank and world_size, or pass this process's) to give each its share",
                placement.launcher, placement.world
            )
        })
    }

    /// Why the CPU path's batches in flight may not fit in memory, when they take more than
    /// half of what this process may use (a container's limit) counting every loader process
    /// on the node: each checks its own ring against the whole limit at build, and together
    /// with the training they could pass it, and the OOM killer ends processes without a
    /// word. The builder also logs it as a warning.
    pub fn memory_note(&self) -> Option<String> {
        if !self.stats().backend.starts_with("cpu") {
            return None;
        }
        let (bytes, batches) = cpu_ring(&self.config, self.sampler());
        let total = crate::launcher::memory_total()?;
        crate::launcher::rings_note(
            bytes?.saturating_mul(batches),
            self.config.placement.local_world,
            total,
        )
    }

    /// Why the `workers` asked for ([`LoaderBuilder::workers`]) are more threads than this
    /// process's share of the node's cores, when they are (PyTorch's `DataLoader` warns
    /// alike); the builder also logs it as a warning. The default never is.
    pub fn workers_note(&self) -> Option<String> {
        let (workers, cores) = (self.config.workers, self.config.node_cores);
        if workers <= cores {
            return None;
        }
        let procs = self.config.placement.local_world;
        let share = if procs > 1 {
            format!("this process's share of the node ({procs} processes on it)")
        } else {
            "this process".to_owned()
        };
        Some(format!(
            "workers={workers}: more threads than the {cores} cores {share} may use; the extra \
             threads do not make the loader faster, they take turns on those cores with the \
             training processes (leave workers unset for {cores})"
        ))
    }

    /// Why every epoch of this loader is empty, when it is: `drop_last` over more ranks
    /// than samples cuts them all, and dropping partial batches (by default with
    /// `drop_last`) with a batch size above this rank's share drops the one batch there is;
    /// a training loop would run without a word. The builder also logs it as a warning.
    pub fn empty_epochs_note(&self) -> Option<String> {
        let sampler = self.sampler();
        let (len, world, share) = (
            sampler.dataset_len(),
            sampler.world_size(),
            sampler.rank_share(),
        );
        (sampler.num_batches() == 0).then(|| match share {
            0 => format!(
                "every epoch is empty: drop_last cuts all {len} samples, fewer than the \
                 {world} ranks; turn drop_last off"
            ),
            _ => format!(
                "every epoch is empty: dropping the partial batch (drop_partial_batch, by \
                 default as drop_last) drops the only batch, as batch_size {} is above the \
                 {share} samples of this rank's share ({len} samples over {world} ranks); \
                 lower the batch size or keep the partial batch (drop_partial_batch false)",
                sampler.batch_size(),
            ),
        })
    }
}
