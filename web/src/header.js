import { $, h } from './dom.js';
import { fmtBytes, fmtInt } from './format.js';

export function renderHeader(doc) {
  const m = doc.machine || {};
  const parts = [];
  parts.push(h('span', {}, 'Host ', h('b', {}, m.hostname || '?')));
  parts.push(h('span', {}, 'CPU ', h('b', {}, `${m.cpu || '?'}${m.cpu_threads ? ` (${m.cpu_threads} threads)` : ''}`)));
  if (m.gpu) {
    parts.push(h('span', { id: 'machine-gpu' }, 'GPU ', h('b', {}, m.gpu.name),
      ` (sm ${m.gpu.compute_capability}, ${fmtInt(m.gpu.sms)} SMs, ${fmtBytes(m.gpu.memory_bytes)})`));
  } else {
    parts.push(h('span', { id: 'machine-gpu' }, 'GPU ', h('b', {}, 'none'), ' (GPU rows not measured on this machine)'));
  }
  const b = m.build || {};
  parts.push(h('span', {}, 'flashbox ', h('b', {}, b.version || '?'),
    b.cuda ? ` with CUDA (${b.cuda_archs})` : ' without CUDA'));
  if (doc.generated_at) parts.push(h('span', {}, 'measured ', h('b', {}, doc.generated_at)));
  $('machine').append(...parts);

  const steps = doc.steps || {};
  const bench = steps.bench && steps.bench.config;
  const mem = steps.memory && steps.memory.config;
  const blk = steps.blocking;
  const cfg = bench || mem;
  const items = [];
  if (cfg) {
    items.push(['batch', cfg.batch], ['heads', cfg.heads], ['head_dim', cfg.head_dim], ['dtype', cfg.dtype]);
  }
  if (blk && blk.measured) items.push(['block', `${blk.block_m} × ${blk.block_n}`]);
  if (bench) items.push(['mask', bench.causal ? 'causal' : 'none'], ['timing', `median of ${bench.repeats}`]);
  $('config').append(...items.map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, String(v)))));
}
