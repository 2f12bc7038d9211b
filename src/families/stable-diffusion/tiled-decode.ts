/**
 * Tiled VAE decoding: latents larger than a tile are decoded as overlapping
 * tiles, one at a time, and blended linearly across each overlap, so the
 * decoder's activations (the largest working memory of the pipeline at large
 * sizes) are those of one tile whatever the image's size.
 *
 * Tiles are an approximation: the SD VAE decoder's group norms and its
 * mid-block attention see only their tile. That is why latents that fit one
 * tile are decoded whole, exactly as without tiling, and why tiles overlap:
 * where two tiles disagree (a tile's colour statistics differ a little from
 * its neighbour's), the blend turns the difference into a gradient across
 * the overlap instead of a seam.
 *
 * Pure arithmetic over a `decodeTile` callback, so it is testable without a
 * model: tile origins, blend weights, accumulation.
 */

/** Tile side and overlap of a tiled decode, in latent cells. */
export interface Tiling {
  tile: number;
  overlap: number;
}

/**
 * 64 latents (512 px at SD's factor 8) is the size SD 1.x/2.x and SD-Turbo
 * were trained and are used at: their default images decode whole, as
 * before, and a larger one decodes in tiles no larger than a 512×512 image
 * needs. 16 latents (128 px) of overlap, a quarter tile: wide enough that a
 * linear ramp hides the tiles' small differences. The price is work: a
 * 768×768 image decodes as four 512×512 tiles (overlapping by 256 px, as
 * tiles are spread evenly), 1.8× the decoder's work of a whole decode, for
 * the activations of a 512×512 one (0.44× the area, and the mid-block
 * attention's scores 0.2×).
 */
export const DEFAULT_TILING: Tiling = { tile: 64, overlap: 16 };

/** Throws when a tiling cannot cover an image (tile not a positive integer, overlap not below it). */
export function checkTiling({ tile, overlap }: Tiling): void {
  if (!Number.isInteger(tile) || tile < 1) throw new Error(`VAE tile must be a positive integer of latent cells; got ${tile}`);
  if (!Number.isInteger(overlap) || overlap < 0 || overlap >= tile) throw new Error(`VAE tile overlap must be an integer from 0 to ${tile - 1} (below the tile); got ${overlap}`);
}

/**
 * Where tiles of `tile` cells start along a side of `size` cells: as few
 * tiles as cover it while neighbours share at least `overlap` cells, spread
 * evenly, the first at 0 and the last flush with the end (so no tile is
 * narrower than the others and no overlap is narrower than asked). One
 * tile at 0 when the side fits.
 */
export function tileOrigins(size: number, tile: number, overlap: number): number[] {
  if (size <= tile) return [0];
  const count = Math.ceil((size - overlap) / (tile - overlap));
  return Array.from({ length: count }, (_, i) => Math.round((i * (size - tile)) / (count - 1)));
}

/**
 * Each tile's blend weight along one side, per pixel of the tile, such that
 * at every pixel the weights of the tiles covering it sum to 1. Before
 * normalisation a tile's weight ramps linearly from near 0 at an edge it
 * shares with a neighbour up to 1 across their overlap (pixel centres, so
 * never exactly 0: every pixel keeps a positive total), and is 1 elsewhere.
 */
export function blendWeights(origins: readonly number[], tileCells: number, factor: number): Float32Array[] {
  const length = tileCells * factor;
  const raw = origins.map((origin, i) => {
    const before = i > 0 ? (origins[i - 1]! + tileCells - origin) * factor : 0;
    const after = i < origins.length - 1 ? (origin + tileCells - origins[i + 1]!) * factor : 0;
    return Float32Array.from({ length }, (_, p) => Math.min(before ? (p + 0.5) / before : 1, after ? (length - p - 0.5) / after : 1, 1));
  });
  const total = new Float64Array((origins.at(-1)! + tileCells) * factor);
  raw.forEach((w, i) => w.forEach((v, p) => (total[origins[i]! * factor + p]! += v)));
  return raw.map((w, i) => w.map((v, p) => v / total[origins[i]! * factor + p]!));
}

export interface LatentGrid {
  channels: number;
  height: number;
  width: number;
  /** Pixels per latent cell (the VAE's factor, 8). */
  factor: number;
}

/** Decodes latents [C, h, w] into pixels [3, h·factor, w·factor]; may take ownership of `latents` (its buffer can be transferred). */
export type DecodeTile = (latents: Float32Array, height: number, width: number) => Promise<Float32Array>;

/**
 * Pixels [3, H, W] of latents [C, h, w]: one call of `decodeTile` with the
 * latents themselves when they fit one tile, else one per tile (rows of
 * tiles, top to bottom), each tile's pixels added into the image with its
 * blend weights as soon as it is decoded. `signal` is checked between tiles.
 */
export async function decodeTiled(latents: Float32Array, grid: LatentGrid, tiling: Tiling, decodeTile: DecodeTile, signal?: AbortSignal): Promise<Float32Array> {
  const { channels, height, width, factor } = grid;
  if (height <= tiling.tile && width <= tiling.tile) return decodeTile(latents, height, width);
  const th = Math.min(tiling.tile, height);
  const tw = Math.min(tiling.tile, width);
  const rows = tileOrigins(height, th, tiling.overlap);
  const cols = tileOrigins(width, tw, tiling.overlap);
  const rowWeights = blendWeights(rows, th, factor);
  const colWeights = blendWeights(cols, tw, factor);
  const W = width * factor;
  const plane = height * factor * W;
  const ph = th * factor;
  const pw = tw * factor;
  const image = new Float32Array(3 * plane);
  for (const [r, y0] of rows.entries()) {
    for (const [c, x0] of cols.entries()) {
      signal?.throwIfAborted();
      const tile = new Float32Array(channels * th * tw);
      for (let ch = 0; ch < channels; ch++) {
        for (let y = 0; y < th; y++) {
          const from = ch * height * width + (y0 + y) * width + x0;
          tile.set(latents.subarray(from, from + tw), (ch * th + y) * tw);
        }
      }
      const pixels = await decodeTile(tile, th, tw);
      if (pixels.length !== 3 * ph * pw) throw new Error(`VAE decoder gave ${pixels.length} values for a ${th}x${tw} latent tile; expected ${3 * ph * pw}`);
      const wy = rowWeights[r]!;
      const wx = colWeights[c]!;
      for (let ch = 0; ch < 3; ch++) {
        for (let y = 0; y < ph; y++) {
          const at = ch * plane + (y0 * factor + y) * W + x0 * factor;
          const from = (ch * ph + y) * pw;
          const k = wy[y]!;
          for (let x = 0; x < pw; x++) image[at + x]! += pixels[from + x]! * k * wx[x]!;
        }
      }
    }
  }
  return image;
}
