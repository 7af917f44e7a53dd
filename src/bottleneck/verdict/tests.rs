//! The verdict's tests, on synthetic capacities.

use super::*;

fn cpu_caps() -> Capacities {
    Capacities {
        path: Some(PipelinePath::Cpu),
        read: Some(95_000.0),
        read_mb_per_s: Some(4_400.0),
        read_cold: true,
        cpu_decode: Some(1_950.0),
        cores: 2,
        ..Default::default()
    }
}

fn gpu_caps() -> Capacities {
    Capacities {
        path: Some(PipelinePath::Gpu),
        read: Some(200_000.0),
        read_mb_per_s: Some(9_300.0),
        cpu_decode: Some(12_000.0),
        cores: 16,
        h2d: Some(500_000.0),
        h2d_gb_per_s: Some(23.0),
        gpu_decode: Some(31_000.0),
        transform: Some(80_000.0),
        ..Default::default()
    }
}

#[test]
fn cpu_decode_bound_on_two_cores() {
    let v = judge(&cpu_caps());
    assert_eq!(v.bound, Some(Bound::Decode));
    assert!(v
        .text
        .starts_with("decode-bound: CPU decode 1,950 img/s on 2 cores"));
    assert!(v.text.contains("storage read (cold) 95,000"), "{}", v.text);
    assert!(!v.text.contains("end to end"), "{}", v.text);
    let mut c = cpu_caps();
    c.end_to_end = Some(1_560.0);
    let v = judge(&c);
    assert!(
        v.text
            .ends_with("end to end 1,560 img/s = 80% of the bound"),
        "{}",
        v.text
    );
    let m = v.margin.unwrap();
    assert!((m - 95_000.0 / 1_950.0).abs() < 1e-9);
}

#[test]
fn storage_bound_names_mb_per_s() {
    let mut c = gpu_caps();
    c.read = Some(9_800.0);
    c.read_mb_per_s = Some(1_200.0);
    c.read_cold = true;
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Storage));
    assert!(
        v.text.starts_with(
            "storage-bound: storage read (cold) 1200 MB/s = 9,800 img/s < GPU decode 31,000"
        ),
        "{}",
        v.text
    );
    assert!(v.text.contains("NVMe"));

    // Warm (a dataset the page cache holds): faster storage is not the advice.
    c.read_cold = false;
    c.read_cached = true;
    let v = judge(&c);
    assert!(
        v.text.starts_with("storage-bound: storage read (warm)"),
        "{}",
        v.text
    );
    assert!(!v.text.contains("NVMe"), "{}", v.text);
    assert!(v.text.contains("from the page cache"), "{}", v.text);

    // Warm only because the cache could not be dropped, of a dataset larger than it:
    // training reads the storage, and faster storage is still the advice.
    c.read_cached = false;
    let v = judge(&c);
    assert!(
        v.text.starts_with("storage-bound: storage read (warm)"),
        "{}",
        v.text
    );
    assert!(v.text.contains("NVMe"), "{}", v.text);
}

#[test]
fn gpu_decode_bound() {
    let v = judge(&gpu_caps());
    assert_eq!(v.bound, Some(Bound::Decode));
    assert!(
        v.text.starts_with("decode-bound: GPU decode 31,000"),
        "{}",
        v.text
    );
    assert_eq!(v.next.as_deref(), Some("GPU transforms"));
}

#[test]
fn pcie_bound() {
    let mut c = gpu_caps();
    c.h2d = Some(5_000.0);
    c.h2d_gb_per_s = Some(0.25);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Pcie));
    assert!(
        v.text.starts_with("pcie-bound: H2D 0.2 GB/s = 5,000 img/s"),
        "{}",
        v.text
    );
}

#[test]
fn gpu_transform_bound() {
    let mut c = gpu_caps();
    c.transform = Some(7_000.0);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Gpu));
    assert!(v.text.starts_with("gpu-bound"), "{}", v.text);
}

#[test]
fn consumer_bound_when_the_step_is_slowest_and_fed() {
    let mut c = gpu_caps();
    c.consumer = Some(2_560.0); // batch 256 at 100 ms
    c.end_to_end = Some(2_540.0);
    c.fed_ratio = Some(0.99);
    c.cpu_util = Some(0.2);
    c.gpu_util = Some(0.99);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Consumer));
    assert_eq!(v.input_bound_rule, Some(false));
    assert!(v.text.starts_with("consumer-bound"), "{}", v.text);
    assert!(v.text.contains("not input-bound"), "{}", v.text);
}

#[test]
fn input_bound_rule_holds_on_cpu_path() {
    // The step could take 5,120 img/s, the 2 CPU cores decode 1,950: the
    // consumer idles (fed 38 %) while the CPU is pegged.
    let mut c = cpu_caps();
    c.consumer = Some(5_120.0);
    c.end_to_end = Some(1_900.0);
    c.fed_ratio = Some(0.38);
    c.cpu_util = Some(0.97);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Decode));
    assert_eq!(v.input_bound_rule, Some(true));
    assert!(
        v.text.contains(
            "input-bound by the utilization rule (consumer busy 38% < 70%, CPU 97% > 85%)"
        ),
        "{}",
        v.text
    );
}

#[test]
fn input_bound_rule_boundaries_are_strict() {
    let mut c = cpu_caps();
    c.fed_ratio = Some(0.70);
    c.cpu_util = Some(0.99);
    assert_eq!(judge(&c).input_bound_rule, Some(false));
    c.fed_ratio = Some(0.69);
    c.cpu_util = Some(0.85);
    assert_eq!(judge(&c).input_bound_rule, Some(false));
    c.cpu_util = Some(0.86);
    assert_eq!(judge(&c).input_bound_rule, Some(true));
    // A measured GPU busy fraction takes precedence over the fed ratio.
    c.gpu_util = Some(0.9);
    assert_eq!(judge(&c).input_bound_rule, Some(false));
}

#[test]
fn loader_bound_when_stages_outrun_the_step_but_it_starves() {
    let mut c = cpu_caps();
    c.consumer = Some(1_000.0);
    c.end_to_end = Some(400.0);
    c.fed_ratio = Some(0.4);
    c.cpu_util = Some(0.5);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Loader));
    assert!(v.text.starts_with("loader-bound"), "{}", v.text);
}

#[test]
fn input_stage_just_above_the_step_is_the_bound_when_it_starves() {
    // Step 640 img/s, CPU decode 674: nominally the step is slowest, but the
    // margin is 5 % and the loop is fed half the time: decode has no headroom.
    let mut c = cpu_caps();
    c.cpu_decode = Some(674.0);
    c.consumer = Some(640.0);
    c.end_to_end = Some(318.0);
    c.fed_ratio = Some(0.5);
    c.cpu_util = Some(0.3);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Decode), "{}", v.text);
    assert!(
        v.text.starts_with(
            "decode-bound: CPU decode 674 img/s on 2 cores ≈ the training step 640 img/s"
        ),
        "{}",
        v.text
    );
    // Fed enough: the step is the bound after all.
    c.fed_ratio = Some(0.97);
    assert_eq!(judge(&c).bound, Some(Bound::Consumer));
}

#[test]
fn unmeasured_and_degenerate_stages_are_ignored() {
    let mut c = cpu_caps();
    c.h2d = Some(0.0);
    c.gpu_decode = Some(f64::NAN);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Decode));
    let none = judge(&Capacities::default());
    assert_eq!(none.bound, None);
    assert!(none.text.starts_with("no verdict"));
}

#[test]
fn cpu_transforms_bound_raw_records_on_the_cpu_path() {
    // Raw records: nothing to decode, a warm read far above what the CPU
    // transforms manage. Storage was named before, at 4 % of the end-to-end rate.
    let c = Capacities {
        path: Some(PipelinePath::Cpu),
        read: Some(67_663.0),
        read_mb_per_s: Some(10_319.0),
        read_cached: true,
        cpu_transform: Some(2_900.0),
        end_to_end: Some(2_605.0),
        cores: 2,
        ..Default::default()
    };
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Transform), "{}", v.text);
    assert!(
        v.text.starts_with(
            "transform-bound: CPU transforms 2,900 img/s on 2 cores < storage read (warm) 67,663 img/s"
        ),
        "{}",
        v.text
    );
    // No GPU stage was measured: no `--device cuda` to advise.
    assert!(
        v.text
            .contains("or run the transforms on a GPU (none was measured here)"),
        "{}",
        v.text
    );
    assert!(!v.text.contains("--device cuda"), "{}", v.text);
    assert!(v.text.ends_with("= 90% of the bound"), "{}", v.text);
    assert_eq!(Bound::Transform.name(), "transform");
    // The CPU path run on a machine with a GPU (the loader fell back): the GPU is advised.
    let with_gpu = Capacities {
        h2d: Some(40_000.0),
        ..c.clone()
    };
    let v = judge(&with_gpu);
    assert!(
        v.text
            .contains("run the transforms on the GPU (--device cuda)"),
        "{}",
        v.text
    );

    // With JPEG records decode and transforms share the workers: together they manage
    // 1 / (1/1,950 + 1/5,850) = 1,463 img/s, the bound the end to end is held to, named
    // by the one that takes more of the time.
    let mut c = cpu_caps();
    c.cpu_transform = Some(5_850.0);
    c.end_to_end = Some(1_390.0);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Decode));
    assert!(
        v.text.starts_with(
            "decode-bound: CPU decode 1,950 img/s on 2 cores, 1,463 img/s with the CPU transforms (5,850 img/s) on the same cores < storage read (cold) 95,000"
        ),
        "{}",
        v.text
    );
    assert!(v.text.ends_with("= 95% of the bound"), "{}", v.text);
    c.cpu_transform = Some(900.0);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Transform));
    assert!(
        v.text.starts_with(
            "transform-bound: CPU transforms 900 img/s on 2 cores, 616 img/s with the CPU decode (1,950 img/s) on the same cores"
        ),
        "{}",
        v.text
    );
}

#[test]
fn cpu_time_per_image_lifts_the_cpu_bound_above_the_stage_counters() {
    // The bench red-team's figures on 2 cores: transforms 113, decode 275, end to end 86
    // img/s, 115 % of the composed 80 img/s, since each stage's busy time counted the
    // time its threads stood preempted by the other's. The process's 45 images per
    // CPU-second on 2 cores make 90 img/s, which end to end cannot pass.
    let mut c = cpu_caps();
    c.read = Some(60_000.0);
    c.cpu_decode = Some(275.0);
    c.cpu_transform = Some(113.0);
    c.end_to_end = Some(86.0);
    c.img_per_cpu_s = Some(45.0);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Transform), "{}", v.text);
    assert!(
        v.text.starts_with(
            "transform-bound: CPU decode and transforms 90 img/s on 2 cores, from the end-to-end run's 45 images per CPU-second \
             (by their own counters: transforms 113 img/s, decode 275 img/s, 80 img/s together) < storage read"
        ),
        "{}",
        v.text
    );
    assert!(v.text.ends_with("= 96% of the bound"), "{}", v.text);

    // Where the process spends more CPU time per image than the stages (reading, batching),
    // the stage counters stand, and the text does not mention the CPU time.
    c.img_per_cpu_s = Some(30.0);
    c.end_to_end = Some(58.0);
    let v = judge(&c);
    assert!(
        v.text.starts_with(
            "transform-bound: CPU transforms 113 img/s on 2 cores, 80 img/s with the CPU decode (275 img/s) on the same cores < storage read"
        ),
        "{}",
        v.text
    );

    // Raw records: the transforms alone, lifted the same way.
    let c = Capacities {
        path: Some(PipelinePath::Cpu),
        read: Some(67_663.0),
        read_cached: true,
        cpu_transform: Some(2_900.0),
        img_per_cpu_s: Some(1_600.0),
        end_to_end: Some(3_050.0),
        cores: 2,
        ..Default::default()
    };
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Transform), "{}", v.text);
    assert!(
        v.text.starts_with(
            "transform-bound: CPU transforms 3,200 img/s on 2 cores, from the end-to-end run's 1,600 images per CPU-second \
             (by their own counters: 2,900 img/s) < storage read (warm) 67,663 img/s"
        ),
        "{}",
        v.text
    );
    assert!(v.text.ends_with("= 95% of the bound"), "{}", v.text);

    // The GPU path's stages are not CPU work: the CPU time per image leaves them alone.
    let mut c = gpu_caps();
    c.img_per_cpu_s = Some(1_000_000.0);
    let v = judge(&c);
    assert_eq!(v.bound, Some(Bound::Decode), "{}", v.text);
    assert!(!v.text.contains("CPU-second"), "{}", v.text);
}

#[test]
fn an_epoch_of_fewer_batches_than_cores_is_said_beside_end_to_end() {
    // The 15-photo sample at the default batch of 256 on 16 cores: one batch an epoch,
    // built by one worker, end to end at a sixteenth of the bound without a word why.
    let mut c = cpu_caps();
    c.cores = 16;
    c.cpu_transform = Some(5_850.0);
    c.end_to_end = Some(100.0);
    c.epoch_batches = Some(1);
    let v = judge(&c);
    assert!(
        v.text.contains(
            "(an epoch here is 1 batch, and a worker builds whole batches: at most 1 of the 16 cores worked; lower --batch to measure them all)"
        ),
        "{}",
        v.text
    );
    c.epoch_batches = Some(3);
    assert!(judge(&c).text.contains("is 3 batches"));
    // Enough batches for every worker, or the GPU path: nothing to say.
    c.epoch_batches = Some(16);
    assert!(!judge(&c).text.contains("whole batches"));
    let mut g = gpu_caps();
    g.end_to_end = Some(20_000.0);
    g.epoch_batches = Some(1);
    assert!(!judge(&g).text.contains("whole batches"));
}

#[test]
fn cpu_transforms_do_not_count_on_the_gpu_path() {
    let mut c = gpu_caps();
    c.cpu_transform = Some(10.0);
    assert_eq!(judge(&c).bound, Some(Bound::Decode));
}

#[test]
fn gpu_stages_do_not_count_on_the_cpu_path() {
    let mut c = cpu_caps();
    c.gpu_decode = Some(10.0);
    c.transform = Some(10.0);
    assert_eq!(judge(&c).bound, Some(Bound::Decode));
}

#[test]
fn rates_are_grouped() {
    assert_eq!(fmt_rate(9_800.0), "9,800");
    assert_eq!(fmt_rate(1_234_567.4), "1,234,567");
    assert_eq!(fmt_rate(512.0), "512");
    assert_eq!(fmt_rate(2.5), "2.5");
}
