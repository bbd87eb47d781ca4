// Groups measured rows (flashbox's bench rows and the peers' rows) into named series.

// A row that never ran (out of memory, error) has no kernel name; it belongs to the series of the same
// implementation, device and direction (the kernel name of its measured rows).
export function seriesKernel(rows, row) {
  if (row.kernel) return row.kernel;
  const direction = row.direction || 'forward';
  const twin = rows.find((r) => r.kernel && r.impl === row.impl && r.device === row.device &&
    (r.direction || 'forward') === direction);
  return twin ? twin.kernel : '';
}

export function benchSeries(bench) {
  if (!bench || !bench.measured || !Array.isArray(bench.rows)) return [];
  const byKey = new Map();
  for (const row of bench.rows) {
    const direction = row.direction || 'forward';
    const kernel = seriesKernel(bench.rows, row);
    const key = `${row.impl}|${row.device}|${kernel}|${direction}`;
    if (!byKey.has(key)) {
      byKey.set(key, {
        key, source: 'flashbox', impl: row.impl, device: row.device, kernel,
        direction, label: kernel ? `${row.impl} · ${row.device} (${kernel})` : `${row.impl} · ${row.device}`, rows: [],
      });
    }
    byKey.get(key).rows.push(row);
  }
  return [...byKey.values()];
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
    const key = `peer|${row.impl}|${row.direction}`;
    if (!byKey.has(key)) {
      // compare_sdpa.py also times flashbox itself (impl "flashbox", "flashbox_naive") in the same run.
      const label = row.impl.startsWith('flashbox')
        ? `${row.impl.replace('_', ' ')} (same run as SDPA)` : `PyTorch ${row.impl}`;
      byKey.set(key, { key, source: 'peer', impl: row.impl, device: peers.device, kernel: row.impl,
        direction: row.direction || 'forward', label, rows: [] });
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
