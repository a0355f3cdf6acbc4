//! Whether the stages' workgroup sums may use subgroup operations (`shared/reduce_subgroup`):
//! the device must run subgroups of one fixed size, placed in order of the local invocation
//! index at every workgroup width the stages use. `shaders/subgroups.wgsl` shows where they
//! sit; each context runs it once.

use super::context::GpuContext;
use super::shaders::{Reductions, compose};
use super::stage::WORKGROUP;

/// The features to ask a device of `adapter` for: subgroups, where it has them at one size.
pub(crate) fn wanted(adapter: &wgpu::Adapter) -> wgpu::Features {
    match fixed_size(&adapter.get_info()) {
        Some(_) => adapter.features() & wgpu::Features::SUBGROUP,
        None => wgpu::Features::empty(),
    }
}

/// The subgroup size of an adapter whose subgroups all have one size, dividing the stages'
/// workgroups.
fn fixed_size(info: &wgpu::AdapterInfo) -> Option<u32> {
    let size = info.subgroup_min_size;
    (size == info.subgroup_max_size && size > 0 && WORKGROUP.is_multiple_of(size)).then_some(size)
}

/// How the stages on `context`'s device make their workgroup sums: through subgroups where
/// the device has the feature, one subgroup size, and subgroups placed as the sums assume at
/// each of `widths` (workgroup sizes); else the tree.
pub(crate) fn reductions(context: &GpuContext, widths: &[u32]) -> Reductions {
    let device = &context.device;
    let Some(size) = fixed_size(&device.adapter_info()) else { return Reductions::Tree };
    if !device.features().contains(wgpu::Features::SUBGROUP) {
        return Reductions::Tree;
    }
    let placed = |width: u32| {
        context
            .guarded(|| placement(context, width))
            .is_ok_and(|sizes| sizes.len() == width as usize && sizes.iter().all(|&s| s == size))
    };
    if widths.iter().all(|&width| placed(width)) { Reductions::Subgroup(size) } else { Reductions::Tree }
}

/// Per invocation of one workgroup of `width`: the subgroup size if it sits where the sums
/// assume, else 0.
fn placement(context: &GpuContext, width: u32) -> crate::error::Result<Vec<u32>> {
    let device = &context.device;
    let source = compose("subgroups", Reductions::Tree, false)?;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("subgroups"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("subgroups"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &[("WIDTH", width as f64)],
            ..Default::default()
        },
        cache: None,
    });
    let bytes = 4 * width as u64;
    let placement = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("subgroup placement"),
        size: bytes,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("subgroups"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry { binding: 0, resource: placement.as_entire_binding() }],
    });
    let mut encoder =
        device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("subgroups") });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
    context.queue.submit([encoder.finish()]);
    let read = context.read_bytes(&placement, 0, bytes)?;
    Ok(read.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::context;
    use super::*;

    /// A device with subgroups of one size that divides the workgroups (lavapipe's 8,
    /// NVIDIA's 32) sums through them: the placement check must pass there, or the subgroup
    /// sums would silently go untested.
    #[test]
    fn a_device_with_fixed_subgroups_sums_through_them() {
        let Some(context) = context() else { return };
        let info = context.device.adapter_info();
        let expected = match fixed_size(&info) {
            Some(size) if context.device.features().contains(wgpu::Features::SUBGROUP) => {
                Reductions::Subgroup(size)
            }
            _ => Reductions::Tree,
        };
        println!(
            "{}: subgroups {}..{}, {:?}",
            info.name, info.subgroup_min_size, info.subgroup_max_size, expected
        );
        assert_eq!(context.reductions(), expected);
        // And each width the stages use places them as the sums assume.
        if let Reductions::Subgroup(size) = expected {
            for width in super::super::pcg::workgroup_widths(&context.device.limits()) {
                let sizes = placement(&context, width).unwrap();
                assert_eq!(sizes.len(), width as usize);
                assert!(sizes.iter().all(|&s| s == size), "width {width}: {sizes:?}");
            }
        }
    }
}
