// Programmatic dependent launch (sm_90; CUDA programming guide "Programmatic Dependent Launch and
// Synchronization", PTX griddepcontrol), device side. A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization (flashbox::cuda::launch_kernel, launch_attributes.hpp)
// may start while the kernel before it in the stream still runs: as soon as every CTA of that kernel
// has executed launch_dependents or exited. Each of its threads that reads what that kernel wrote
// (or writes what it reads or writes) first executes grid_dependency_wait, which returns once the
// preceding grid has completed and its memory operations are visible. It says nothing about grids
// further back unless the preceding one itself waited for them or was launched normally (then
// everything before it had completed before it started). Without the launch attribute both are
// no-ops (the kernel starts after its predecessor completed).
#pragma once

namespace flashbox::sm90 {

// The dependent grid may be scheduled once every CTA of this grid executed this or exited; one
// execution per CTA counts (more are no-ops). It promises nothing about this grid's memory.
__device__ __forceinline__ void grid_dependents_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// Blocks this thread until the preceding grid in the stream completed and its writes are visible.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

}  // namespace flashbox::sm90
