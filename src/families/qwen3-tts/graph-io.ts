/**
 * Finding a graph's inputs and outputs by what they are, not only by what
 * one exporter called them: the int4 and fp16 exports of the talker and code
 * predictor rename outputs (`logits_Q4`) and declare float16 where the fp32
 * export declares float32. A role is bound to its exact name, else to a
 * name that begins with it (an exporter's suffix), else to the first free
 * value of its element kind and shape, else to the next free value of its
 * element kind in graph order (exports list the values in the same order).
 */

/** A graph input or output as the session describes it (shape entries: sizes, or names of symbolic axes). */
export interface GraphValue {
  name: string;
  type: string;
  shape: ReadonlyArray<number | string>;
}

export interface Role {
  /** The fp32 export's name. */
  name: string;
  kind: 'float' | 'integer';
  /** Declared shape check; a size the graph leaves symbolic passes. */
  shape?: ReadonlyArray<number | undefined>;
}

export const isFloat = (value: GraphValue) => value.type === 'float32' || value.type === 'float16';
const isInteger = (value: GraphValue) => value.type === 'int64' || value.type === 'int32';
const ofKind = (value: GraphValue, kind: Role['kind']) => (kind === 'float' ? isFloat(value) : isInteger(value));

function fitsShape(value: GraphValue, shape: ReadonlyArray<number | undefined>): boolean {
  if (value.shape.length !== shape.length) return false;
  return shape.every((size, axis) => {
    const declared = value.shape[axis];
    return size === undefined || typeof declared !== 'number' || declared <= 0 || declared === size;
  });
}

/** Each role's value (distinct values), or an error naming the role no value could fill. */
export function bindRoles<R extends string>(values: readonly GraphValue[], roles: Record<R, Role>, graph: string): Record<R, GraphValue> {
  const bound = new Map<R, GraphValue>();
  const free = (value: GraphValue) => ![...bound.values()].includes(value);
  const entries = Object.entries(roles) as Array<[R, Role]>;
  const passes: Array<(value: GraphValue, role: Role) => boolean> = [
    (value, role) => value.name === role.name,
    (value, role) => value.name.startsWith(role.name) && ofKind(value, role.kind),
    (value, role) => ofKind(value, role.kind) && role.shape !== undefined && fitsShape(value, role.shape),
    (value, role) => ofKind(value, role.kind),
  ];
  for (const pass of passes) {
    for (const [key, role] of entries) {
      if (bound.has(key)) continue;
      const value = values.find((v) => free(v) && pass(v, role));
      if (value) bound.set(key, value);
    }
  }
  for (const [key, role] of entries) {
    if (!bound.has(key)) throw new Error(`the ${graph} graph has no ${role.kind} value for '${role.name}' (it has ${values.map((v) => `${v.name}: ${v.type}`).join(', ')})`);
  }
  return Object.fromEntries(bound) as Record<R, GraphValue>;
}

/** A static size of a value's axis (negative axes count from the end), or undefined when symbolic. */
export function staticSize(value: GraphValue, axis: number): number | undefined {
  const size = value.shape[axis < 0 ? value.shape.length + axis : axis];
  return typeof size === 'number' && size > 0 ? size : undefined;
}
