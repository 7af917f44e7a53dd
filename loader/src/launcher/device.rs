//! The GPU [`Device::Auto`] takes for a process of a given local rank.

use crate::config::Device;

/// The device a loader asked for `requested` runs on, for the process with local
/// rank `local_rank`, where `visible_devices` says how many CUDA devices the
/// driver reports (called only for [`Device::Auto`]):
///
/// - [`Device::Cpu`] and [`Device::Cuda`] are kept as they are: an explicit
///   choice always wins;
/// - [`Device::Auto`] takes device `local_rank mod visible_devices`, or the CPU
///   when no device is visible.
///
/// The ordinal counts within the devices this process can see: when
/// `CUDA_VISIBLE_DEVICES` is set the driver itself numbers only the devices it
/// lists, from 0, so `Cuda(1)` with `CUDA_VISIBLE_DEVICES=4,5` is physical
/// device 5. A launcher that gives every process one device through
/// `CUDA_VISIBLE_DEVICES` thus gets `Cuda(0)` everywhere (one visible device),
/// which is that process's own GPU. With more processes than devices on a node
/// they share devices round-robin.
///
/// # Examples
///
/// ```
/// use stoker_loader::launcher::choose_device;
/// use stoker_loader::Device;
/// assert_eq!(choose_device(Device::Auto, 5, || 8), Device::Cuda(5));
/// assert_eq!(choose_device(Device::Auto, 5, || 4), Device::Cuda(1));
/// assert_eq!(choose_device(Device::Auto, 5, || 1), Device::Cuda(0));
/// assert_eq!(choose_device(Device::Auto, 5, || 0), Device::Cpu);
/// assert_eq!(choose_device(Device::Cuda(2), 5, || 8), Device::Cuda(2));
/// assert_eq!(choose_device(Device::Cpu, 5, || 8), Device::Cpu);
/// ```
pub fn choose_device(
    requested: Device,
    local_rank: u64,
    visible_devices: impl FnOnce() -> usize,
) -> Device {
    match requested {
        Device::Auto => match visible_devices() {
            0 => Device::Cpu,
            n => Device::Cuda((local_rank % n as u64) as usize),
        },
        explicit => explicit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_the_local_rank_modulo_the_visible_devices() {
        for local_rank in 0..8u64 {
            assert_eq!(
                choose_device(Device::Auto, local_rank, || 8),
                Device::Cuda(local_rank as usize)
            );
            assert_eq!(
                choose_device(Device::Auto, local_rank, || 3),
                Device::Cuda(local_rank as usize % 3)
            );
            assert_eq!(choose_device(Device::Auto, local_rank, || 0), Device::Cpu);
        }
        // An explicit choice never asks for the device count.
        let never = || -> usize { panic!("the device count was asked for an explicit device") };
        assert_eq!(choose_device(Device::Cuda(7), 2, never), Device::Cuda(7));
        assert_eq!(choose_device(Device::Cpu, 2, never), Device::Cpu);
    }
}
