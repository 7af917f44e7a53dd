//! `stoker.Loader` and its stats.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pyo3::exceptions::{PyKeyError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use stoker_loader::{LoaderBuilder, LoaderError, LoaderState, OnError, Owner};

use crate::args;
use crate::dataset::Dataset;
use crate::epoch::{self, Epoch, EpochShared, PendingEpoch, StoppedBy, Which};
use crate::errors::{loader_error, warn, StokerError};
use crate::loader_args::{self, bad, parse_shuffle, spelled, GpuSettings, TransformArgs};
use crate::locks::lock;
use crate::logging::Call;
use crate::sampler::LoaderSampler;
use crate::stats::Stats;

/// The loader: reads a dataset in a deterministic order, decodes (nvJPEG on the GPU or
/// the CPU), crops, flips and normalizes into batches, and reports whether it keeps up.
///
/// ``data`` is a dataset path or a ``stoker.Dataset``. The defaults are a training
/// loader's (shuffled, random crops); a validation loader wants ``shuffle=False,
/// crop="center"``. ``shuffle``: ``True`` (the default, also when ``None``: a new
/// permutation per epoch, from ``seed`` and the epoch), ``False`` (dataset order) or
/// ``"quasi"`` (page-cache friendly blocks of ``quasi_block`` records). ``crop``:
/// ``"random"`` (the default: RandomResizedCrop to ``size``, with torchvision's ``scale``
/// (0.08, 1.0) and ``ratio`` (3/4, 4/3) unless given) or ``"center"`` (resize the
/// shorter side to ``resize``, default ``size * 8 / 7``, then a center crop; the source
/// window is rounded to whole pixels, so pixels differ slightly from torchvision's
/// ``Resize`` then ``CenterCrop``, which crops a resized image). ``mean``/``std``
/// normalize float outputs (``stoker.IMAGENET_MEAN``/``IMAGENET_STD``; given together or
/// not at all; default none: pixels / 255; refused with ``dtype="uint8"``, which is raw
/// pixels). ``dtype``: ``"float32"``, ``"float16"`` or ``"bfloat16"`` (a model trained in
/// bfloat16 takes it without a cast; NumPy has no such type, ``torch.from_dlpack`` takes
/// it) with ``layout="nchw"`` (the default) or ``"nhwc"`` (``[n, h, w, 3]``, whose
/// ``permute(0, 3, 1, 2)`` is a channels-last ``[n, 3, h, w]`` tensor without a copy),
/// or ``"uint8"`` (``layout="nhwc"``, raw pixels);
/// ``torch.float16`` and the like are taken too. ``device``: ``"auto"`` (the GPU if
/// usable, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (or a ``torch.device``,
/// or the int ``N``, which torch reads as ``cuda:N``). ``mean`` and ``std`` take three
/// numbers: a tuple, a list or an array (NumPy's, a tensor). ``rank`` and ``world_size``
/// default to the launcher's variables (torchrun's ``RANK`` / ``WORLD_SIZE``, Open MPI's, MVAPICH's,
/// MPICH's, Horovod's, an ``srun`` step's); given explicitly, they keep the environment's
/// local rank (which GPU, what share of the node). What the loader had to assume (a
/// Slurm batch step without ``srun``, a missing local count) is a ``UserWarning`` and
/// ``stats()["placement"]["note"]``. Without any launcher (``torch.multiprocessing.spawn``)
/// pass ``rank`` and ``world_size``: the ``world_size`` processes are then taken to share
/// the node (each takes its share of the cores and pinned memory, and ``device="auto"``
/// GPU ``rank``); where they span nodes, pass ``device="cuda:N"``, ``workers`` and
/// ``pinned_memory`` too.
/// Each rank gets an equal share of the epoch's order, the same number of batches on
/// every rank: as with PyTorch's ``DistributedSampler``, a dataset that does not divide
/// evenly is padded by repeating the first samples of the order (so a validation epoch
/// over all ranks may count a few samples twice). ``drop_last=True`` cuts that tail *and*
/// each rank's last partial batch, as ``DistributedSampler(drop_last=True)`` with
/// ``DataLoader(drop_last=True)`` would; ``drop_partial_batch`` (default: as ``drop_last``)
/// sets the second apart: ``drop_last=True, drop_partial_batch=False`` sees no sample twice
/// and keeps the partial batch. Unlike ``DistributedSampler``, whose rank ``r``
/// takes every ``world_size``-th sample from ``r``, a rank takes a consecutive slice of
/// the order: code that gathers ranks' results by interleaving them must use each
/// batch's ``indices`` (or join the ranks in rank order) instead.
/// ``indices``: draw from these records only (a list, ``range`` or integer array of
/// record indices, as ``torch.utils.data.Subset`` or FFCV's ``indices``): a train /
/// validation split or some classes of one converted dataset, a quick run on a fraction.
/// Shuffling, ranks, ``drop_last``, ``len()``, replacements of bad records and
/// ``state_dict()`` all count in them; an index given twice is drawn twice an epoch; with
/// ``shuffle=False`` they come in the order given. ``Dataset.labels()`` gives every
/// record's label, to choose by class.
/// ``prefetch``: batches in flight; ``workers``: CPU threads;
/// ``on_error``: ``"replace"`` a bad record by another sample of the epoch (drawn from
/// ``seed``, epoch and position) or ``"raise"``. ``seed`` drives the order and every
/// random draw (crops, flips, replacements), also with ``shuffle=False``.
///
/// GPU path only (ignored on the CPU): ``pinned_memory``, the bytes of pinned staging
/// the loader may allocate (default: its share of the node's memory);
/// ``page_lock_limit``, the most bytes of raw datasets this process keeps page-locked
/// for direct copies, all its loaders together (default half the memory; a dataset
/// larger than what the others leave moves a window of shards through the rest, with
/// ``shuffle="quasi"`` or ``False``, or keeps as many shards locked as fit, shuffled
/// whole); ``gpu_waits``, how host threads wait for
/// the GPU: ``"spin"``, ``"block"`` (the core serves the reader threads meanwhile) or
/// ``"auto"`` (spin, which measured best); ``gpu_cpu_share``, the fraction of
/// each batch's engine-decodable JPEGs decoded on the CPUs beside the JPEG engines.
///
/// A bool where a number is wanted is a ``TypeError`` (``batch_size=True`` is not a
/// batch of one, nor ``hflip=True`` a flip of every image), and so is a float where an
/// int is; a number out of range (a negative count, a ``nan``) is a ``ValueError``
/// naming its keyword.
///
/// Iterate with ``for images, labels in loader`` (the epoch set by ``set_epoch`` or
/// ``load_state_dict``, else the one after the last begun: as with a PyTorch
/// ``DataLoader``, a loop left early with ``break`` does not repeat its epoch) or
/// ``loader.epoch(e)``. An iterator starts its epoch at its first ``next``, and one
/// iterator runs at a time: a newer one stops the older ones (as training frameworks
/// expect; PyTorch Lightning's ``sampler.set_epoch`` is ``loader.sampler.set_epoch``). A loader runs in the process that built it: build it after a
/// ``fork``, not before. It has its own worker threads: do not wrap it in a
/// ``torch.utils.data.DataLoader`` (each DataLoader worker would read the whole epoch).
///
/// Shards are memory-mapped: replace a dataset that is being read by writing the new one
/// elsewhere and renaming it into place (``mv``), never by copying over it (``cp -r``,
/// ``rsync --inplace``): the records of a shard cut short under a running epoch are lost
/// (skipped and counted in ``stats()["bad_records"]``), and the next epoch raises
/// ``stoker.StokerError`` until the dataset is opened again.
#[pyclass(module = "stoker", frozen, weakref)]
pub(crate) struct Loader {
    /// The loader while open, and what it said of itself once closed.
    inner: Mutex<Slot>,
    /// The epoch iterators handed out, for `close` to stop (each holds the loader).
    epochs: Mutex<Vec<Weak<EpochShared>>>,
    /// The epoch the next `iter(loader)` runs, set by `set_epoch` or `load_state_dict`;
    /// used up by the first iterator over it that starts.
    next_epoch: PendingEpoch,
    /// The process that built it: in a fork, the iterators' threads and locks may belong
    /// to threads that do not exist, so nothing waits for them.
    process: Owner,
    /// The placement read from the launcher's variables, when the caller gave no rank and
    /// world size: checked against `torch.distributed` at build and again as each epoch
    /// starts, for a `torch.multiprocessing.spawn` process that built the loader before
    /// `init_process_group`.
    placed_from_env: Option<Arc<stoker_loader::Placement>>,
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (
        data, batch_size=256, *, shuffle=None, seed=0, quasi_block=512, drop_last=false,
        drop_partial_batch=None, indices=None, crop="random", size=224, resize=None, scale=None, ratio=None, hflip=0.0, mean=None,
        std=None,
        dtype=None, layout=None, device=None, rank=None, world_size=None,
        prefetch=None, workers=None, on_error="replace", prefetch_next_epoch=true,
        pinned_memory=None, page_lock_limit=None, gpu_waits="auto", gpu_cpu_share=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::batch_size)] batch_size: usize,
        shuffle: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::seed)] seed: u64,
        #[pyo3(from_py_with = args::quasi_block)] quasi_block: u32,
        #[pyo3(from_py_with = args::drop_last)] drop_last: bool,
        drop_partial_batch: Option<&Bound<'_, PyAny>>,
        indices: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::crop)] crop: &str,
        #[pyo3(from_py_with = args::crop_size)] size: u32,
        #[pyo3(from_py_with = args::resize)] resize: Option<u32>,
        #[pyo3(from_py_with = args::scale)] scale: Option<(f64, f64)>,
        #[pyo3(from_py_with = args::ratio)] ratio: Option<(f64, f64)>,
        #[pyo3(from_py_with = args::hflip)] hflip: f64,
        #[pyo3(from_py_with = args::mean)] mean: Option<[f32; 3]>,
        #[pyo3(from_py_with = args::std)] std: Option<[f32; 3]>,
        dtype: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::output_layout)] layout: Option<String>,
        device: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::rank)] rank: Option<usize>,
        #[pyo3(from_py_with = args::world_size)] world_size: Option<usize>,
        #[pyo3(from_py_with = args::prefetch)] prefetch: Option<usize>,
        #[pyo3(from_py_with = args::workers)] workers: Option<usize>,
        #[pyo3(from_py_with = args::on_error)] on_error: &str,
        #[pyo3(from_py_with = args::prefetch_next_epoch)] prefetch_next_epoch: bool,
        #[pyo3(from_py_with = args::pinned_memory)] pinned_memory: Option<u64>,
        #[pyo3(from_py_with = args::page_lock_limit)] page_lock_limit: Option<u64>,
        #[pyo3(from_py_with = args::gpu_waits)] gpu_waits: &str,
        #[pyo3(from_py_with = args::gpu_cpu_share)] gpu_cpu_share: Option<f32>,
    ) -> PyResult<Self> {
        let _logs = Call::new(py);
        let dataset = match data.cast::<Dataset>() {
            Ok(ds) => ds.get().inner.clone(),
            Err(_) => {
                let path_by_type = args::is_path_by_type(data)?;
                let path = args::path(data, "data").map_err(|e| {
                    if e.is_instance_of::<PyTypeError>(py) && !path_by_type {
                        PyTypeError::new_err(format!(
                            "data: want a dataset path or a stoker.Dataset, not {}",
                            data.get_type()
                        ))
                    } else {
                        e
                    }
                })?;
                py.detach(|| stoker_formats::Dataset::open(&path))
                    .map_err(crate::errors::format_error)?
            }
        };
        // Read against the dataset: the first index past it stops the reading.
        let indices = crate::indices::indices(indices, dataset.len())?;
        let shuffle = parse_shuffle(shuffle, seed, quasi_block)?;
        let dtype = spelled(dtype, "dtype")?;
        let transform = TransformArgs {
            crop,
            size,
            resize,
            scale,
            ratio,
            hflip,
            mean,
            std,
            uint8: dtype.as_deref() == Some("uint8"),
        }
        .transform(py)?;
        let output = crate::batch::output(dtype.as_deref(), layout.as_deref())?;
        let device = loader_args::device(device)?;
        let on_error = match on_error {
            "replace" => OnError::Replace,
            "raise" => OnError::Error,
            other => return Err(bad("on_error", other, "\"replace\" or \"raise\"")),
        };
        let mut builder = stoker_loader::Loader::builder(dataset)
            .batch_size(batch_size)
            .shuffle(shuffle)
            .seed(seed)
            .drop_last(drop_last)
            .transform(transform)
            .output(output)
            .device(device)
            .on_error(on_error)
            .prefetch_next_epoch(prefetch_next_epoch);
        if let Some(d) = drop_partial_batch {
            builder = builder.drop_partial_batch(args::boolean(d, "drop_partial_batch")?);
        }
        if let Some(indices) = indices {
            builder = builder.indices(indices);
        }
        let from_env = rank.is_none() && world_size.is_none();
        builder = placed(builder, rank, world_size)?;
        if let Some(w) = workers {
            builder = builder.workers(w);
        }
        if let Some(p) = prefetch {
            builder = builder.prefetch(p);
        }
        let gpu = GpuSettings {
            pinned_memory,
            page_lock_limit,
            waits: gpu_waits,
            cpu_share: gpu_cpu_share,
        };
        builder = gpu.apply(builder)?;
        let inner = build(py, builder)?;
        let placed_from_env = crate::torch_dist::checked_at_build(py, &inner, from_env)?;
        OPEN.fetch_add(1, Ordering::Relaxed);
        Ok(Loader {
            inner: Mutex::new(Slot::Open(Arc::new(inner))),
            epochs: Mutex::new(Vec::new()),
            next_epoch: Arc::new(Mutex::new(None)),
            process: Owner::default(),
            placed_from_env,
        })
    }

    /// Batches per epoch on this rank (the same on every rank).
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.open_or_at_close(|l| l.num_batches(), |c| c.num_batches) as usize)
    }

    /// Stops the loader now: its epoch iterators end (their next ``next`` raises
    /// ``stoker.StokerError``), its threads are joined and its
    /// batch buffers and shard maps freed (batches you still hold stay valid). ``stats()``,
    /// ``state_dict()``, ``len()``, ``batch_size`` and ``drop_last`` then give what they
    /// gave at the close; any other use raises ``stoker.StokerError``. Also what leaving a ``with stoker.Loader(...)
    /// as loader:`` block does; without it the loader is freed when the last reference
    /// to it goes, which for one caught in a reference cycle (a trainer object in a
    /// notebook) is only when Python's garbage collector runs; building a loader while
    /// another is open runs the collector first, so a cell run again frees the last
    /// run's loader before the new one takes its memory.
    fn close(&self, py: Python<'_>) {
        let _logs = Call::new(py);
        // Under the iterators' lock: an iterator made meanwhile is either in the list
        // stopped here or finds the loader closed (`iterator`).
        // While its iterators stop, the loader is `Closing`: no new iterator, but another
        // thread's `stats()` or `state_dict()` still gets an answer.
        let (loader, epochs) = {
            let mut epochs = lock(&self.epochs);
            let mut slot = lock(&self.inner);
            let loader = match &*slot {
                Slot::Open(l) => Some(l.clone()),
                Slot::Closing(_) | Slot::Closed(_) => None,
            };
            if let Some(l) = &loader {
                *slot = Slot::Closing(l.clone());
            }
            (loader, std::mem::take(&mut *epochs))
        };
        if loader.is_some() {
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
        self.stop(py, epochs, StoppedBy::Close);
        if let Some(loader) = loader {
            let at_close = AtClose {
                stats: loader.stats(),
                state: self.state_of(&loader),
                num_batches: loader.num_batches(),
                batch_size: loader.sampler().batch_size(),
                drop_last: loader.sampler().drop_last(),
            };
            *lock(&self.inner) = Slot::Closed(Arc::new(at_close));
            py.detach(move || drop(loader));
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// A loader owns threads, shard maps and batch memory that no other process can
    /// have, so it cannot be pickled; the ``TypeError`` says what to send instead (a
    /// ``stoker.Dataset`` pickles as its path), where Python's own would only say that
    /// the type cannot be pickled. Multiprocessing's spawn start method and some
    /// trainers pickle what a worker is given.
    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(
            "a stoker.Loader cannot be pickled (it owns threads and memory of this \
             process): send the dataset's path or a stoker.Dataset (which pickles as its \
             path) and build the Loader in the process that iterates it",
        ))
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }

    /// An iterator over the epoch set by ``set_epoch`` or ``load_state_dict`` (once),
    /// else the epoch after the last one begun, as they stand at its first ``next``. It
    /// stops this loader's earlier iterators.
    fn __iter__(&self, py: Python<'_>) -> PyResult<Epoch> {
        let _logs = Call::new(py);
        // Each `for` is a new epoch: after the last one, 2**64-1, there is none (it ran
        // the last again, with its order and crops).
        if epoch::next_epoch_of(&*self.inner()?, &self.next_epoch).is_none() {
            return Err(PyOverflowError::new_err(
                "the loader ran epoch 2**64-1, the last: set_epoch() says which to run next",
            ));
        }
        self.iterator(py, Which::Next)
    }

    /// The epoch the next ``for ... in loader`` runs (like
    /// ``DistributedSampler.set_epoch``: the order and augmentations depend on it).
    fn set_epoch(&self, #[pyo3(from_py_with = args::epoch)] epoch: u64) -> PyResult<()> {
        self.inner()?;
        *lock(&self.next_epoch) = Some(epoch);
        Ok(())
    }

    /// An iterator over the batches of ``epoch`` (from the resume position, after
    /// ``load_state_dict`` of this epoch; after ``load_state_dict`` of the epoch before,
    /// saved past its first batch, from its first batch, with a ``UserWarning`` saying
    /// what of the state's epoch is skipped; after ``load_state_dict`` of any other epoch
    /// its first ``next`` raises ``ValueError``, and the state stays pending). It starts at
    /// its first ``next``, and stops this loader's earlier iterators: their next ``next``
    /// raises ``stoker.StokerError``.
    fn epoch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::epoch)] epoch: u64,
    ) -> PyResult<Epoch> {
        let _logs = Call::new(py);
        self.iterator(py, Which::Fixed(epoch))
    }

    /// An object whose ``set_epoch(epoch)`` is the loader's: frameworks that call
    /// ``dataloader.sampler.set_epoch`` at each epoch (PyTorch Lightning, Accelerate)
    /// then set stoker's epoch too. Nothing else of a torch ``Sampler``.
    #[getter]
    fn sampler(slf: &Bound<'_, Self>) -> LoaderSampler {
        LoaderSampler::new(slf.clone().into_any().unbind())
    }

    /// Images per batch (the last batch of an epoch may hold fewer), as a ``DataLoader``'s
    /// ``batch_size``.
    #[getter]
    fn batch_size(&self) -> PyResult<u64> {
        Ok(self.open_or_at_close(|l| l.sampler().batch_size(), |c| c.batch_size))
    }

    /// Whether the tail that does not divide over the ranks is cut (and, unless
    /// ``drop_partial_batch`` says otherwise, each rank's partial batch), as a
    /// ``DataLoader``'s ``drop_last``.
    #[getter]
    fn drop_last(&self) -> PyResult<bool> {
        Ok(self.open_or_at_close(|l| l.sampler().drop_last(), |c| c.drop_last))
    }

    /// ``None``: the loader makes its own batches. There for frameworks that read a
    /// loader's ``batch_sampler`` whenever it has a ``sampler`` (PyTorch Lightning).
    #[getter]
    fn batch_sampler(&self) -> Option<()> {
        None
    }

    /// The loader's counters: a mapping (``stats["fed_ratio"]``, ``stats["stages"]``,
    /// ``stats["verdict"]``...; ``dict(stats)``) whose ``str()`` is the Rust table. In a
    /// ``fork`` of the process that built the loader, the counters as they were at the
    /// fork, less any part a loader thread was writing then (it reads as empty). After
    /// ``close()``, the counters at the close.
    fn stats(&self) -> PyResult<Stats> {
        Ok(Stats::new(
            self.open_or_at_close(|l| l.stats(), |c| c.stats.clone()),
        ))
    }

    /// Zeroes the flow counters (e.g. after a warm-up epoch).
    fn reset_stats(&self) -> PyResult<()> {
        self.inner()?.reset_stats();
        Ok(())
    }

    /// Where the loader stands: ``{"seed", "epoch", "position"}`` (batches of
    /// ``epoch`` already handed out; after a loop left early this still points into that
    /// epoch, which ``load_state_dict`` continues, while this loader's own next ``for``
    /// starts the next epoch, as a resumed one does after ``set_epoch(epoch + 1)``; after
    /// a ``set_epoch`` not yet begun, between epochs, that epoch at position 0), with
    /// the ``"batch_size"``, ``"world_size"``, ``"samples"`` (the dataset's length, or the
    /// number of ``indices``), ``"indices"`` (``"all"``, or a fingerprint of the
    /// ``indices`` list), ``"drop_last"``, ``"drop_partial_batch"``, ``"order"`` (``"global"``,
    /// ``"sequential"`` or ``"quasi:BLOCK"``) and ``"dataset"`` (a fingerprint of the
    /// dataset's manifest: its shards' digests, not its path, so a re-sharded conversion
    /// of the same images is another dataset) that give ``position`` its meaning, and
    /// ``"draws"`` (the version of the rules for orders, crops, flips and bad-record
    /// replacements: a state saved under other rules is refused, one without it warns).
    /// Save it with the model; ``load_state_dict`` continues exactly there (torchdata's
    /// ``StatefulDataLoader`` convention). In a ``fork`` of the process that built the
    /// loader (a checkpoint written by a forked process), where it stood at the fork.
    /// After ``close()``, where it stood at the close.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.open_or_at_close(|l| self.state_of(l), |c| c.state);
        let d = PyDict::new(py);
        d.set_item("seed", s.seed)?;
        d.set_item("epoch", s.epoch)?;
        d.set_item("position", s.position)?;
        d.set_item("batch_size", s.batch_size)?;
        d.set_item("world_size", s.world_size)?;
        d.set_item("samples", s.samples)?;
        d.set_item("indices", s.indices.map(|i| i.to_string()))?;
        d.set_item("drop_last", s.drop_last)?;
        d.set_item("drop_partial_batch", s.drop_partial_batch)?;
        d.set_item("order", s.order.map(|o| o.to_string()))?;
        d.set_item("dataset", s.dataset.map(|f| f.to_string()))?;
        d.set_item("draws", s.draws)?;
        Ok(d)
    }

    /// Continue from a ``state_dict()``: the next iteration is its epoch, from the
    /// first batch not yet handed out; for a state saved after its epoch's last batch, the
    /// epoch after it (what the loader that saved it ran next; ``set_epoch(state["epoch"])``
    /// asks for the finished epoch instead, which yields nothing): a resumed loop that
    /// counts its own epochs says which with ``set_epoch``. For a state inside its epoch
    /// (past its first batch), ``set_epoch`` of the epoch after it starts that one instead,
    /// as the loader that saved the state did after a loop left early (a ``UserWarning``
    /// says what was skipped); another epoch first raises ``ValueError``. Raises
    /// ``ValueError`` for a state of another seed, batch size, number of ranks, dataset,
    /// ``indices``, ``drop_last``, ``drop_partial_batch`` or order (where the state gives
    /// them), or past the end of the epoch, or a negative number, and ``TypeError`` for a
    /// number that is not an int (a bool is not), an ``order``, ``indices`` or ``dataset``
    /// that is not a str or a ``drop_last`` / ``drop_partial_batch`` that is not a bool
    /// (a refused state leaves the loader and its
    /// iterators as they were). A state it takes stops this loader's iterators, as a newer
    /// one would (their next ``next`` raises ``stoker.StokerError``).
    fn load_state_dict(&self, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let py = state.py();
        let _logs = Call::new(py);
        // A key that is missing or None: not recorded (a state from an older stoker).
        let present = |key: &str| Ok::<_, PyErr>(state.get_item(key)?.filter(|v| !v.is_none()));
        // Numbers as the int arguments are checked (`True` is not epoch 1), named by key.
        let optional = |key: &str| -> PyResult<Option<u64>> {
            present(key)?
                .map(|v| args::int(&v, &format!("state[{key:?}]"), args::Bounds::at_least(0)))
                .transpose()
        };
        let get = |key: &str| -> PyResult<u64> {
            optional(key)?.ok_or_else(|| PyKeyError::new_err(format!("state_dict has no {key:?}")))
        };
        let state = LoaderState {
            seed: get("seed")?,
            epoch: get("epoch")?,
            position: get("position")?,
            batch_size: optional("batch_size")?,
            world_size: optional("world_size")?,
            samples: optional("samples")?,
            indices: args::parsed(present("indices")?, "state[\"indices\"]")?,
            drop_last: present("drop_last")?
                .map(|v| args::boolean(&v, "state[\"drop_last\"]"))
                .transpose()?,
            drop_partial_batch: present("drop_partial_batch")?
                .map(|v| args::boolean(&v, "state[\"drop_partial_batch\"]"))
                .transpose()?,
            order: args::parsed(present("order")?, "state[\"order\"]")?,
            dataset: args::parsed(present("dataset")?, "state[\"dataset\"]")?,
            draws: present("draws")?
                .map(|v| args::int(&v, "state[\"draws\"]", args::Bounds::at_least(0)))
                .transpose()?,
        };
        let inner = self.inner()?;
        // The state is checked before any iterator is stopped: a refused one leaves a
        // running epoch alone. A running one makes the load wait for it to be stopped.
        // `load_state` logs the note raised below: held back, then forgotten.
        let note = state.unversioned_note();
        // Both loads log it (the check comes before the refusal of a running epoch).
        let load = || {
            let (loaded, mut held) = crate::logging::holding(|| inner.load_state(state));
            if let Some(note) = &note {
                held.handed_over(note);
            }
            loaded
        };
        let loaded = match load() {
            Err(LoaderError::StateWhileIterating { .. }) => {
                self.stop_iterators(py, StoppedBy::Newer);
                load()
            }
            loaded => loaded,
        };
        loaded.map_err(loader_error)?;
        // Iterators made before and not started (Lightning makes one to check that the
        // loader is iterable, then restores a checkpoint) were made for what came before.
        self.stop_iterators(py, StoppedBy::Newer);
        // An earlier set_epoch is forgotten: the next `for` runs the state's epoch (the
        // loader's pending one, `next_epoch_of`), which any epoch that starts uses up.
        // Copied here, it outlived a state that `loader.epoch(e + 1)` took, and the next
        // `for` ran the state's epoch again from its first batch.
        *lock(&self.next_epoch) = None;
        if let Some(note) = note {
            warn(py, format!("stoker: {note}"))?;
        }
        Ok(())
    }

    /// Stops the next epoch started early (after the last epoch you train); returns
    /// whether one was running.
    fn cancel_prefetch(&self, py: Python<'_>) -> PyResult<bool> {
        let _logs = Call::new(py);
        let inner = self.inner()?;
        // Stopping the early start joins its threads: not with the GIL held.
        Ok(py.detach(|| inner.cancel_prefetch()))
    }

    fn __repr__(&self) -> String {
        match &*lock(&self.inner) {
            Slot::Open(inner) => format!(
                "stoker.Loader(batches_per_epoch={}, backend={:?})",
                inner.num_batches(),
                inner.stats().backend
            ),
            Slot::Closing(_) | Slot::Closed(_) => "stoker.Loader(closed)".into(),
        }
    }
}

/// Where a Python loader is in its life ([`Loader::close`]).
#[derive(Clone)]
enum Slot {
    Open(Arc<stoker_loader::Loader>),
    /// Its iterators are stopping: it answers as an open loader but gives no iterator.
    Closing(Arc<stoker_loader::Loader>),
    Closed(Arc<AtClose>),
}

/// What a closed loader still answers ([`Loader::close`]): the counters, where it stood
/// and its batches, which a script reads after its `with` block (the stats it prints at
/// the end, a last checkpoint).
struct AtClose {
    stats: stoker_loader::Stats,
    state: LoaderState,
    num_batches: u64,
    batch_size: u64,
    drop_last: bool,
}

impl Loader {
    /// `open(loader)` of the loader while it is open or closing; once closed, `closed`
    /// of what it said at the close ([`AtClose`]).
    fn open_or_at_close<T>(
        &self,
        open: impl FnOnce(&stoker_loader::Loader) -> T,
        closed: impl FnOnce(&AtClose) -> T,
    ) -> T {
        // A copy: the slot's lock is not held through the call, as `open` may take others.
        let slot = lock(&self.inner).clone();
        match slot {
            Slot::Open(l) | Slot::Closing(l) => open(&l),
            Slot::Closed(c) => closed(&c),
        }
    }

    /// Where `inner` stands, as `state_dict` gives it.
    fn state_of(&self, inner: &stoker_loader::Loader) -> LoaderState {
        let mut s = inner.state();
        // A `set_epoch` not yet begun, while no batch of the current epoch is out or all
        // are: that epoch is where this loader stands (a checkpoint taken between
        // `set_epoch` and the first batch), and a resume followed by the same
        // `set_epoch` continues it instead of refusing another epoch.
        if let Some(epoch) = *lock(&self.next_epoch) {
            let between = s.position == 0 || s.position >= inner.num_batches();
            if epoch != s.epoch && between && inner.pending_epoch().is_none() {
                (s.epoch, s.position) = (epoch, 0);
            }
        }
        s
    }

    /// A new iterator over `which` epoch, after stopping the earlier ones.
    fn iterator(&self, py: Python<'_>, which: Which) -> PyResult<Epoch> {
        // A closed loader has no iterators left to stop; it is refused under the lock.
        self.stop_iterators(py, StoppedBy::Newer);
        // The loader taken and the iterator listed under one lock, which `close` takes.
        let mut epochs = lock(&self.epochs);
        let it = Epoch::new(
            self.inner()?,
            which,
            Arc::clone(&self.next_epoch),
            self.placed_from_env.clone(),
        );
        epochs.push(it.shared());
        Ok(it)
    }

    /// Stops every iterator of this loader (each joins its pipeline's threads).
    fn stop_iterators(&self, py: Python<'_>, by: StoppedBy) {
        let epochs = std::mem::take(&mut *lock(&self.epochs));
        self.stop(py, epochs, by);
    }

    /// Stops `epochs`; in a fork only marks them (see `process`): their next `next` raises.
    fn stop(&self, py: Python<'_>, epochs: Vec<Weak<EpochShared>>, by: StoppedBy) {
        let forked = self.process.forked();
        for e in epochs.iter().filter_map(Weak::upgrade) {
            if forked {
                e.mark_stopped(by);
            } else {
                e.stop(py, by);
            }
        }
    }

    /// The loader, or `StokerError` once closed.
    fn inner(&self) -> PyResult<Arc<stoker_loader::Loader>> {
        match &*lock(&self.inner) {
            Slot::Open(l) => Ok(l.clone()),
            Slot::Closing(_) | Slot::Closed(_) => Err(StokerError::new_err(
                "the loader is closed (Loader.close())",
            )),
        }
    }
}

/// `builder` with the caller's `rank` and `world_size`, both or neither (then the
/// launcher's).
fn placed(
    builder: LoaderBuilder,
    rank: Option<usize>,
    world_size: Option<usize>,
) -> PyResult<LoaderBuilder> {
    match (rank, world_size) {
        (Some(r), Some(w)) => Ok(builder.distributed(r, w)),
        (None, None) => Ok(builder.distributed_from_env()),
        _ => Err(PyValueError::new_err(
            "rank and world_size: give both, or neither (then they come from the launcher's environment)",
        )),
    }
}

/// Loaders of this process built and not yet closed or freed.
static OPEN: AtomicUsize = AtomicUsize::new(0);

impl Drop for Loader {
    fn drop(&mut self) {
        let slot = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if matches!(slot, Slot::Open(_)) {
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Builds to let pass without a collection, after collections that freed no loader.
static SKIP: AtomicU32 = AtomicU32::new(0);
/// How many collections in a row freed no loader (the back-off's exponent).
static IN_VAIN: AtomicU32 = AtomicU32::new(0);

/// Runs Python's garbage collector when other loaders of this process are open, before a
/// new one takes its threads and memory. A loader caught in a reference cycle (a trainer
/// and its callback, re-created each time a notebook cell runs) waits for a full
/// collection, which with PyTorch imported may not come for dozens of runs: each run
/// then kept one more loader's ring (prefetch + workers batches) and threads, and the
/// next build could be refused as not fitting beside them. A collection costs tens of
/// milliseconds with torch imported (more beside a large model), and only where another
/// loader is open; where the open ones are all in use (a script keeping a loader per
/// subset), each collection that freed none doubles the builds let pass before the next,
/// so n such builds cost about log2(n) collections.
fn collect_unreachable_loaders(py: Python<'_>) {
    let open = OPEN.load(Ordering::Relaxed);
    if open == 0 {
        // With no loader open, the back-off starts over.
        SKIP.store(0, Ordering::Relaxed);
        IN_VAIN.store(0, Ordering::Relaxed);
        return;
    }
    // Atomics, not a lock: a finalizer run by the collection may itself build a loader.
    if SKIP
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        return;
    }
    let collected = py.import("gc").and_then(|gc| gc.call_method0("collect"));
    if let Err(e) = collected {
        // Not a reason to refuse the loader: it is built as before.
        tracing::debug!(%e, "gc.collect() before building a loader failed");
    }
    if OPEN.load(Ordering::Relaxed) < open {
        IN_VAIN.store(0, Ordering::Relaxed);
    } else {
        let in_vain = (IN_VAIN.fetch_add(1, Ordering::Relaxed) + 1).min(20);
        SKIP.store((1 << in_vain) - 1, Ordering::Relaxed);
    }
}

/// The loader, after collecting garbage ([`collect_unreachable_loaders`]), its notes raised
/// as `UserWarning`s ([`notes`]). The builder logs them too:
/// those events are held back and forgotten, the others delivered.
fn build(py: Python<'_>, builder: LoaderBuilder) -> PyResult<stoker_loader::Loader> {
    collect_unreachable_loaders(py);
    let (built, mut held) = crate::logging::holding(|| py.detach(|| builder.build()));
    let inner = built.map_err(loader_error)?;
    let notes = notes(&inner);
    for (logged, _) in &notes {
        held.handed_over(logged);
    }
    drop(held);
    for (_, warning) in notes {
        warn(py, warning)?;
    }
    Ok(inner)
}

/// The builder's notes that Python hands over as `UserWarning`s: what the placement had
/// to assume (a Slurm batch step run without srun, a local count guessed), an order that
/// mixes classes poorly, more workers than cores, epochs that drop_last or
/// drop_partial_batch leaves empty,
/// batches in flight that may not fit in a container's memory, a GPU the driver reports
/// that `device="auto"` could not use. Each as `(the message the
/// builder logs it with, the warning)`: the logged one is not delivered to `logging` too.
/// (`ranks_note` has nothing to say here: a Python loader takes the launcher's ranks
/// unless given its own, which it takes as asked.)
fn notes(inner: &stoker_loader::Loader) -> Vec<(String, String)> {
    let mut notes = Vec::new();
    if let Some(note) = inner.stats().placement.and_then(|p| p.note) {
        notes.push((
            format!("launcher variables: {note}"),
            format!("stoker placement: {note}"),
        ));
    }
    for note in [
        inner.mixing_note(),
        inner.workers_note(),
        inner.empty_epochs_note(),
        inner.memory_note(),
        inner.gpu_fallback_note(),
    ]
    .into_iter()
    .flatten()
    {
        notes.push((note.clone(), format!("stoker: {note}")));
    }
    notes
}
