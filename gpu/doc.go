// Package gpu finds the GPUs this container may use and turns them, or the
// CPU quota, into MPI slots.
//
// Detection goes through NVML (github.com/NVIDIA/go-nvml) behind the
// [Detector] interface. [NewNVML] loads libnvidia-ml.so.1 lazily with dlopen,
// so a binary built with cgo runs on CPU-only nodes too: when the library,
// the kernel driver or the devices are missing, the detector reports a
// CPU-only [Inventory] whose Reason says why (unless it was created with
// [WithFailOnInitError]). A binary built without cgo cannot call NVML at all;
// its NVML detector always reports CPU-only with the reason
// "built without cgo: NVML unavailable". [NewNull] is the explicit CPU-only
// detector, and [New] picks one from a --gpu.detect mode (auto, nvml, none).
//
// Visibility follows what the job's processes will see:
//
//   - NVIDIA_VISIBLE_DEVICES (the container runtime's list): unset or "all"
//     means every GPU NVML reports; "none", "void" or "" means none. A list of
//     indices, GPU-/MIG- UUIDs or <gpu>:<mig> pairs filters the devices only
//     when NVML sees more devices than the list names (a privileged pod, or no
//     NVIDIA runtime); otherwise the runtime has already applied it, and the
//     indices inside the container are renumbered, so they are not matched.
//     A value the runtime interprets itself (a path such as
//     /var/run/nvidia-container-devices, or a CDI name such as
//     nvidia.com/gpu=0) leaves the set unchanged.
//   - CUDA_VISIBLE_DEVICES (what CUDA enumerates) is then applied with CUDA's
//     rules: unset means all, "" means none, and a comma list of indices
//     (positions among the GPUs left by the previous step), GPU-UUIDs (or a
//     unique prefix), MIG-UUIDs and legacy MIG-GPU-<uuid>/<gi>/<ci> names is
//     read up to its first invalid or duplicate entry, which ends the list
//     (so "all", "none" and "void" hide every GPU from CUDA, exactly as CUDA
//     does; the Inventory's Reason says so).
//
// When MIG mode is enabled on a GPU, each of its MIG devices is a usable
// device and is counted instead of the parent; a MIG-enabled GPU without MIG
// devices contributes nothing (with a note). An index selects the physical
// GPU, and so all of its MIG devices.
//
// Slots come from a [SlotPolicy] parsed from --slots=auto|gpu|cpu|N by
// [ParseSlots] and resolved with [SlotPolicy.Resolve]: auto uses one slot per
// GPU, or 1 when there is none; cpu uses the cgroup CPU quota rounded down
// (at least 1) read by [CgroupCPUQuota].
//
// [NewNVMLEventWatcher] reports GPU errors as they happen: it registers every
// usable GPU (the parent of a MIG device) in an NVML event set for critical
// Xid and double-bit ECC events and hands each one to a callback as an
// [Event] (worker-agent's account of its pod records them).
//
// Every environment lookup goes through an injected func(string) (string,
// bool), so tests can run in parallel without touching the process
// environment.
package gpu
