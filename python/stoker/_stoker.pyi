"""Type stubs of the extension module (implemented in Rust, python/src)."""

import os
import pathlib
from typing import Any, Dict, ItemsView, Iterable, Iterator, KeysView, List, Literal, Optional, Sequence, Tuple, Union, ValuesView, final, overload

__version__: str
IMAGENET_MEAN: List[float]
IMAGENET_STD: List[float]

# A path as `open` takes one (str, bytes, or an object with `__fspath__`).
_Path = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

class StokerError(Exception): ...

# Hands the log events queued by stoker's threads to `logging` (registered with atexit;
# every stoker call does it when it returns).
def _deliver_logs() -> None: ...

def convert(
    src: _Path,
    out: _Path,
    *,
    list: Optional[_Path] = None,
    encoding: str = "jpeg",
    max_side: Optional[int] = None,
    quality: int = 90,
    size: Optional[Tuple[int, int]] = None,
    resize: str = "shorter-side",
    jobs: Optional[int] = None,
    shard_size: int = 1_073_741_824,
    shards: Optional[int] = None,
    resume: bool = False,
    strict: bool = False,
    max_pixels: int = 100_000_000,
    max_file_size: int = 67_108_864,
    gpu_friendly: bool = False,
    check: bool = True,
    shuffle: bool = False,
    seed: Optional[int] = None,
    layout: str = "auto",
    part: Optional[int] = None,
    parts: Optional[int] = None,
    progress: Optional[bool] = None,
    # With list=: the class names (a list, a Dataset, or a dataset's or a names file's path).
    classes: Optional[Union[Sequence[str], "Dataset", _Path]] = None,
) -> Dict[str, Any]: ...

def merge(
    out: _Path,
    parts: Optional[Sequence[_Path]] = None,
) -> Dict[str, Any]: ...

def _command(args: Sequence[str]) -> int: ...

# Rebuilds a pickled Stats from its JSON (Stats.__reduce__ names it).
def _stats_from_json(text: str) -> "Stats": ...

def verify(
    path: _Path,
    decode: bool = False,
) -> Dict[str, Any]: ...

@final
class Writer:
    def __new__(
        cls,
        out: _Path,
        classes: Optional[Sequence[str]] = None,
        *,
        source: Optional[str] = None,
        encoding: str = "jpeg",
        max_side: Optional[int] = None,
        quality: int = 90,
        size: Optional[Tuple[int, int]] = None,
        resize: str = "shorter-side",
        jobs: Optional[int] = None,
        shard_size: int = 1_073_741_824,
        strict: bool = False,
        max_pixels: int = 100_000_000,
        max_file_size: int = 67_108_864,
        gpu_friendly: bool = False,
        check: bool = True,
        part: Optional[int] = None,
        parts: Optional[int] = None,
    ) -> "Writer": ...
    def write(self, image: Any, label: int, name: Optional[str] = None) -> None: ...
    def close(self) -> Dict[str, Any]: ...
    def finish(self) -> Dict[str, Any]: ...
    def abort(self) -> None: ...
    @property
    def report(self) -> Optional[Dict[str, Any]]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def out(self) -> pathlib.Path: ...
    def __enter__(self) -> "Writer": ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> bool: ...

@final
class Dataset:
    def __new__(cls, path: _Path) -> "Dataset": ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> Tuple[bytes, int]: ...
    def labels(self) -> List[int]: ...
    # The input record `index` came from; None without a source map.
    def source_of(self, index: int) -> Optional[str]: ...
    # `stoker inspect DATASET --record N --json` as a dict: index, shard, source,
    # record (label, class, encoding, width, height, channels, payload_bytes, crc_ok),
    # problem.
    def inspect_record(self, index: int) -> Dict[str, Any]: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def manifest(self) -> Dict[str, Any]: ...
    @property
    def path(self) -> pathlib.Path: ...

@final
class Images:
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    # numpy.asarray(images): host images only (GPU and bfloat16 ones are a TypeError).
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any: ...
    @property
    def shape(self) -> Tuple[int, int, int, int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def data_ptr(self) -> Optional[int]: ...

@final
class Labels:
    """The batch's labels (int64 on the host): ``len``, indexing and slicing (a list),
    iteration, ``tolist()``. Its ``__dlpack__`` exports a copy: a tensor of it is the
    consumer's own. Like ``Batch`` and ``Images``, it is not picklable or copyable: keep
    ``torch.from_dlpack(labels)`` (or ``tolist()``) instead."""

    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int, /) -> int: ...
    @overload
    def __getitem__(self, index: slice, /) -> List[int]: ...
    def __iter__(self) -> Iterator[int]: ...
    def tolist(self) -> List[int]: ...

@final
class Batch:
    """Unpacks as ``images, labels = batch``."""

    @property
    def images(self) -> Images: ...
    @property
    def labels(self) -> Labels: ...
    @property
    def indices(self) -> List[int]: ...
    @property
    def epoch(self) -> int: ...
    @property
    def index(self) -> int: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, i: Literal[0, -2], /) -> Images: ...
    @overload
    def __getitem__(self, i: Literal[1, -1], /) -> Labels: ...
    @overload
    def __getitem__(self, i: int, /) -> Union[Images, Labels]: ...
    # A type checker unpacks `images, labels = batch` through `__iter__`, which cannot give
    # each item its own type (only a tuple's unpacking can): Any, as a DataLoader's batch
    # is, rather than a Union under which `images.shape` is an error. `batch.images`,
    # `batch.labels`, `batch[0]` and `batch[1]` are typed.
    def __iter__(self) -> Iterator[Any]: ...

@final
class Epoch:
    def __iter__(self) -> "Epoch": ...
    def __next__(self) -> Batch: ...
    def __len__(self) -> int:
        """Batches of the epoch this iterator runs, from where it starts (after a
        ``load_state_dict``, those left in the epoch), as a PyTorch ``DataLoader``
        iterator's ``len``: not those still to come; fixed at its first ``next`` and kept
        after ``close()``; 0 for one stopped before it started."""
    def close(self) -> None: ...

@final
class LoaderSampler:
    """``loader.sampler``: ``set_epoch(epoch)`` is ``loader.set_epoch(epoch)``."""

    def set_epoch(self, epoch: int) -> None: ...
    @property
    def loader(self) -> "Loader": ...

@final
class Stats:
    """A read-only view of the counters: ``stats["fed_ratio"]``, ``dict(stats)``,
    ``to_dict()``; ``str(stats)`` is the Rust table."""

    def __getitem__(self, key: str, /) -> Any: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: str, /) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def get(self, key: str, default: Any = None) -> Any: ...
    def keys(self) -> KeysView[str]: ...
    def items(self) -> ItemsView[str, Any]: ...
    def values(self) -> ValuesView[Any]: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def __copy__(self) -> "Stats": ...
    def __deepcopy__(self, memo: Any) -> "Stats": ...
    def to_json(self) -> str: ...

@final
class Loader:
    def __new__(
        cls,
        data: Union[_Path, Dataset],
        batch_size: int = 256,
        *,
        shuffle: Union[bool, str, None] = None,
        seed: int = 0,
        quasi_block: int = 512,
        drop_last: bool = False,
        drop_partial_batch: Optional[bool] = None,
        # Record indices: a list, a range, a NumPy or torch integer array.
        indices: Optional[Iterable[int]] = None,
        crop: str = "random",
        size: int = 224,
        resize: Optional[int] = None,
        scale: Optional[Tuple[float, float]] = None,
        ratio: Optional[Tuple[float, float]] = None,
        hflip: float = 0.0,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        # "float32", "float16", "bfloat16" or "uint8", or an object whose str() is one
        # after "torch." (torch.bfloat16, torch.device("cuda:1")); None: "float32", "auto".
        dtype: Optional[Union[str, Any]] = None,
        layout: Optional[str] = None,
        device: Optional[Union[str, Any]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        prefetch: Optional[int] = None,
        workers: Optional[int] = None,
        on_error: str = "replace",
        prefetch_next_epoch: bool = True,
        pinned_memory: Optional[int] = None,
        page_lock_limit: Optional[int] = None,
        gpu_waits: str = "auto",
        gpu_cpu_share: Optional[float] = None,
    ) -> "Loader": ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Epoch: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Loader": ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> bool: ...
    def set_epoch(self, epoch: int) -> None: ...
    def epoch(self, epoch: int) -> Epoch: ...
    # For frameworks that call dataloader.sampler.set_epoch (PyTorch Lightning).
    @property
    def sampler(self) -> "LoaderSampler": ...
    @property
    def batch_sampler(self) -> None: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def drop_last(self) -> bool: ...
    def stats(self) -> Stats: ...
    def reset_stats(self) -> None: ...
    def state_dict(self) -> Dict[str, Union[int, bool, str, None]]: ...
    def load_state_dict(self, state: Dict[str, Union[int, bool, str, None]]) -> None: ...
    def cancel_prefetch(self) -> bool: ...
