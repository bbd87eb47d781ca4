// Number formatting shared by every section. Each displayed measured number also carries its raw
// JSON value in data-value (and its JSON path in data-path), so tests compare exact values.

export const DASH = '–';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function fmtBytes(n) {
  if (n === null || n === undefined) return DASH;
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(2)} ${UNITS[i]}`;
}

export function fmtInt(n) {
  if (n === null || n === undefined) return DASH;
  return Number(n).toLocaleString('en-US');
}

// Four significant digits; exponent form for very small or very large magnitudes.
export function fmtNum(x) {
  if (x === null || x === undefined) return DASH;
  if (x === 0) return '0';
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a < 1e-3 || a >= 1e6) return x.toExponential(2);
  return String(Number(x.toPrecision(4)));
}

export function fmtMs(x) {
  return x === null || x === undefined ? DASH : `${fmtNum(x)} ms`;
}
