// Groups measured rows (flashbox's bench rows and the peers' rows) into named series, one per
// implementation, device and direction. The kernel that ran is a property of each row (it changes
// with T when the library picks another schedule), shown in the tooltip and the table, never a
// series of its own.

const PEER_NAMES = {
  sdpa_flash: 'SDPA FlashAttention-2',
  sdpa_cudnn: 'SDPA cuDNN',
  sdpa_efficient: 'SDPA memory-efficient',
  sdpa_math: 'SDPA math',
};

export function benchSeries(bench) {
  if (!bench || !bench.measured || !Array.isArray(bench.rows)) return [];
  const byKey = new Map();
  for (const row of bench.rows) {
    const direction = row.direction || 'forward';
    const key = `${row.impl}|${row.device}|${direction}`;
    if (!byKey.has(key)) {
      // On a GPU machine the CPU rows are measured at smaller sizes (cpu_config): the label says so.
      const cc = row.device === 'cpu' && bench.device === 'cuda' ? bench.cpu_config : null;
      byKey.set(key, { key, source: 'flashbox', impl: row.impl, device: row.device, direction,
        label: `${row.impl} · ${row.device}${cc ? ` (batch ${cc.batch}, ${cc.heads} heads)` : ''}`, rows: [] });
    }
    byKey.get(key).rows.push(row);
  }
  for (const s of byKey.values()) s.kernels = [...new Set(s.rows.map((r) => r.kernel).filter(Boolean))];
  return [...byKey.values()];
}

export function peerLabel(impl, device) {
  // compare_sdpa.py also times flashbox itself (impl "flashbox", "flashbox_naive") in the same run.
  if (impl.startsWith('flashbox')) return `${impl.replace('_', ' ')} (same run as SDPA)`;
  // On the CPU, SDPA's flash backend is torch's own CPU kernel, not FlashAttention-2.
  if (device === 'cpu') return `PyTorch SDPA ${impl.replace('sdpa_', '')} · cpu`;
  return `PyTorch ${PEER_NAMES[impl] || impl}`;
}

// Peer rows measured with the same configuration as flashbox's bench (all of them when none match).
export function peerSeries(peers, benchConfig) {
  if (!peers || !peers.measured || !Array.isArray(peers.rows)) return { series: [], filtered: 0 };
  let rows = peers.rows;
  if (benchConfig) {
    const same = rows.filter((r) => r.head_dim === benchConfig.head_dim && r.heads === benchConfig.heads &&
      r.batch === benchConfig.batch && Boolean(r.causal) === Boolean(benchConfig.causal));
    if (same.length) rows = same;
  }
  const byKey = new Map();
  for (const row of rows) {
    const direction = row.direction || 'forward';
    const key = `peer|${row.impl}|${direction}`;
    if (!byKey.has(key)) {
      byKey.set(key, { key, source: 'peer', impl: row.impl, device: row.device || peers.device, direction,
        label: peerLabel(row.impl, row.device), kernels: [], rows: [] });
    }
    byKey.get(key).rows.push({ ...row, status: row.status || 'ok' });
  }
  return { series: [...byKey.values()], filtered: peers.rows.length - rows.length };
}

// The row measured at the seqlen nearest to t (ties: the smaller seqlen).
export function nearestRow(rows, t) {
  let best = null;
  for (const r of rows) {
    const d = Math.abs(r.seqlen - t);
    if (!best || d < Math.abs(best.seqlen - t) || (d === Math.abs(best.seqlen - t) && r.seqlen < best.seqlen)) best = r;
  }
  return best;
}
