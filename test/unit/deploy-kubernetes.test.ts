import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ConfigMap, type IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { IContainer } from 'kubernetes-models/v1/Container';
import { PersistentVolumeClaim, type IPersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import { Service, type IService } from 'kubernetes-models/v1/Service';
import { Deployment, type IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler, type IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { Job, type IJob } from 'kubernetes-models/batch/v1/Job';
import { PodDisruptionBudget, type IPodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { serveCommand } from '../../src/cli/commands/serve.js';
import { Catalog } from '../../src/core/catalog.js';
import { parseDuration } from '../../src/core/units.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * deploy/kubernetes/, offline: every manifest against the Kubernetes OpenAPI
 * schema of its kind (the `kubernetes-models` package's validators), strictly
 * — a field the schema does not define is an error, as `kubectl apply`'s
 * strict field validation makes it — with broken copies that must fail; then
 * what no schema knows: the manifests agree with lserve (its options and
 * variables, its metric, its catalog, its drain) and with one another.
 */

const DIR = fileURLToPath(new URL('../../deploy/kubernetes/', import.meta.url));

/** The models that validate each kind this folder uses: a kind not listed here is an error, not a pass. */
const MODELS: Record<string, { prototype: { validate(): void } }> = {
  'v1/ConfigMap': ConfigMap,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'batch/v1/Job': Job,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
};

/** A parsed document: its type is known once the schema of its kind has passed it (then `only` casts it). */
interface Manifest {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string };
}

/**
 * What is wrong with one manifest: the schema's errors, and every field it
 * does not define. The validators are compiled JSON Schema that read each
 * property they know (and enumerate maps); the manifest is handed to them
 * behind a Proxy that notes what they read, so a key nobody read in an
 * object they looked into is one the schema has no place for.
 */
function problems(manifest: Manifest): string[] {
  const model = MODELS[`${manifest.apiVersion}/${manifest.kind}`];
  if (!model) return [`no schema here for ${manifest.apiVersion} ${manifest.kind}`];
  const read = new Set<string>();
  const entered = new Set<string>();
  const watch = (value: unknown, at: string): unknown => {
    if (value === null || typeof value !== 'object') return value;
    const children = new Map<string, unknown>();
    return new Proxy(value, {
      get(target, key, receiver) {
        entered.add(at);
        if (typeof key !== 'string') return Reflect.get(target, key, receiver);
        read.add(`${at}/${key}`);
        if (!children.has(key)) children.set(key, watch(Reflect.get(target, key, receiver), `${at}/${key}`));
        return children.get(key);
      },
      ownKeys(target) {
        entered.add(at);
        for (const key of Object.keys(target)) read.add(`${at}/${key}`);
        return Reflect.ownKeys(target);
      },
    });
  };
  const found: string[] = [];
  try {
    model.prototype.validate.call(watch(manifest, ''));
  } catch (error) {
    found.push((error as Error).message);
  }
  const unknown = (value: unknown, at: string): void => {
    if (value === null || typeof value !== 'object' || !entered.has(at)) return;
    for (const [key, child] of Object.entries(value)) {
      if (!Array.isArray(value) && !read.has(`${at}/${key}`)) found.push(`data${at}/${key} is not a field of ${manifest.kind}`);
      unknown(child, `${at}/${key}`);
    }
  };
  unknown(manifest, '');
  return found;
}

/** Every document of every file, by file. */
function load(text: string): Manifest[] {
  return parseAllDocuments(text).map((doc) => {
    expect(doc.errors).toEqual([]);
    return doc.toJS() as Manifest;
  });
}

const files = readdirSync(DIR).filter((name) => name.endsWith('.yaml'));
const manifests = files.flatMap((file) => load(readFileSync(`${DIR}${file}`, 'utf8')).map((manifest) => ({ file, manifest })));
interface Kinds {
  Deployment: IDeployment;
  Service: IService;
  PersistentVolumeClaim: IPersistentVolumeClaim;
  Job: IJob;
  PodDisruptionBudget: IPodDisruptionBudget;
  HorizontalPodAutoscaler: IHorizontalPodAutoscaler;
  ConfigMap: IConfigMap;
}
/** The one manifest of a kind (and name), as that kind: the schema tests below check it is one. */
function only<K extends keyof Kinds>(kind: K, name?: string): Kinds[K] {
  const found = manifests.filter((m) => m.manifest.kind === kind && (name === undefined || m.manifest.metadata?.name === name));
  expect(found, `one ${kind}${name ? ` ${name}` : ''}`).toHaveLength(1);
  return found[0]!.manifest as Kinds[K];
}

describe('deploy/kubernetes against the Kubernetes schemas', () => {
  it('holds every kind a replicated lserve needs', () => {
    expect(new Set(manifests.map((m) => m.manifest.kind))).toEqual(new Set(['Deployment', 'Service', 'PersistentVolumeClaim', 'Job', 'PodDisruptionBudget', 'HorizontalPodAutoscaler', 'ConfigMap']));
  });

  it.each(manifests.map((m) => [`${m.file}: ${m.manifest.kind} ${m.manifest.metadata?.name}`, m.manifest] as const))('%s is valid', (_name, manifest) => {
    expect(problems(manifest)).toEqual([]);
  });

  const deployment = () => readFileSync(`${DIR}deployment.yaml`, 'utf8');
  it.each([
    ['a misspelt field', 'readinessProbe:', 'readinesProbe:', /containers\/0\/readinesProbe is not a field of Deployment/],
    ['a string for an integer', 'containerPort: 8080', 'containerPort: "8080"', /containerPort must be integer/],
    ['a container without its name', '- name: lserve\n', '- \n', /containers\/0 must have required property name/],
    ['a field at the wrong level', '  replicas: 3\n', '  replicas: 3\n  terminationGracePeriodSeconds: 45\n', /spec\/terminationGracePeriodSeconds is not a field/],
  ])('a copy of deployment.yaml with %s fails', (_name, from, to, error) => {
    expect(deployment()).toContain(from);
    const [broken] = load(deployment().replace(from, to));
    expect(problems(broken!).join('\n')).toMatch(error);
  });
});

describe('deploy/kubernetes and lserve', () => {
  const deployment = only('Deployment');
  const pod: IPodSpec = deployment.spec!.template.spec!;
  const container = pod.containers[0]!;
  const job: IPodSpec = only('Job').spec!.template.spec!;
  const env = (from: IContainer) => new Map((from.env ?? []).map((e) => [e.name, e]));
  const serverEnv = env(container);
  const value = (name: string) => serverEnv.get(name)?.value ?? '';
  /** The claim a pod spec mounts, its volume and the container's mount of it. */
  const claim = (spec: IPodSpec, claimName: string) => {
    const volume = spec.volumes?.find((v) => v.persistentVolumeClaim?.claimName === claimName);
    expect(volume, claimName).toBeDefined();
    return { volume: volume!.persistentVolumeClaim!, mount: spec.containers[0]!.volumeMounts?.find((m) => m.name === volume!.name) };
  };

  it('names only options and variables lserve serve has', () => {
    const options = serveCommand().options;
    const known = new Set([...options.map((o) => o.envVar), 'LSERVE_HOME']);
    // Named by the shared state backend (--database-url) and shared files (--files-dir) options, built beside
    // this folder: exempt only while serve does not declare them.
    const pending = ['LSERVE_DATABASE_URL', 'LSERVE_FILES_DIR'].filter((name) => !known.has(name));
    expect([...serverEnv.keys()].filter((name) => !known.has(name) && !pending.includes(name))).toEqual([]);
    const [command, ...args] = container.args ?? [];
    expect(command).toBe('serve');
    const longs = new Set(options.map((o) => o.long));
    for (const arg of args) expect(longs, arg).toContain(arg.split('=')[0]);
  });

  it('probes /ready for readiness and /health for liveness, on the port lserve listens on', () => {
    expect(container.readinessProbe?.httpGet?.path).toBe('/ready');
    expect(container.livenessProbe?.httpGet?.path).toBe('/health');
    const port = container.ports?.find((p) => p.name === container.readinessProbe?.httpGet?.port);
    expect(String(port?.containerPort)).toBe(value('LSERVE_PORT'));
    expect(value('LSERVE_HOST')).toBe('0.0.0.0');
  });

  it('gives the drain its time: the grace within the drain timeout, the pod more than both and unloading', () => {
    const timeout = parseDuration(value('LSERVE_DRAIN_TIMEOUT')) / 1000;
    const grace = parseDuration(value('LSERVE_DRAIN_GRACE')) / 1000;
    expect(grace).toBeLessThanOrEqual(timeout);
    // After the timeout: cut connections close at once, and a runner has 5 s to unload before it is killed.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(timeout + 10);
  });

  it('mounts the model store read-only in the replicas and read-write in the pull Job, at $LSERVE_HOME/models', () => {
    const served = claim(pod, 'lserve-models');
    expect(served.volume.readOnly).toBe(true);
    expect(served.mount).toMatchObject({ mountPath: `${value('LSERVE_HOME')}/models`, readOnly: true });
    const pulled = claim(job, 'lserve-models');
    expect(pulled.volume.readOnly).toBeUndefined();
    expect(pulled.mount?.readOnly).toBeUndefined();
    expect(pulled.mount?.mountPath).toBe(`${env(job.containers[0]!).get('LSERVE_HOME')?.value}/models`);
    expect(only('PersistentVolumeClaim', 'lserve-models').spec?.accessModes).toEqual(['ReadWriteMany']);
  });

  it('mounts the shared files read-write where LSERVE_FILES_DIR says, and takes the database URL from a Secret', () => {
    const files = claim(pod, 'lserve-files');
    expect(files.mount?.readOnly).toBeUndefined();
    expect(files.mount?.mountPath).toBe(value('LSERVE_FILES_DIR'));
    expect(only('PersistentVolumeClaim', 'lserve-files').spec?.accessModes).toEqual(['ReadWriteMany']);
    expect(serverEnv.get('LSERVE_DATABASE_URL')?.valueFrom?.secretKeyRef).toMatchObject({ name: expect.any(String), key: expect.any(String) });
  });

  it('pulls only models the catalog has', () => {
    const catalog = Catalog.load(fileURLToPath(new URL('../../models.json', import.meta.url)));
    const script = (job.containers[0]!.args ?? []).join(' ');
    const ids = /for model in ([^;]+);/.exec(script)?.[1]?.trim().split(/\s+/) ?? [];
    expect(ids.length).toBeGreaterThan(0);
    for (const id of ids) expect(catalog.get(id), id).toBeDefined();
    expect(script).toContain('lserve pull "$model"');
  });

  it("selects the Deployment's pods from the Service and the PodDisruptionBudget, and scales that Deployment", () => {
    const labels = deployment.spec!.template.metadata!.labels!;
    expect(labels).toMatchObject(deployment.spec!.selector.matchLabels!);
    for (const selector of [only('Service').spec!.selector!, only('PodDisruptionBudget').spec!.selector!.matchLabels!]) expect(labels).toMatchObject(selector);
    expect(only('HorizontalPodAutoscaler').spec!.scaleTargetRef).toEqual({ apiVersion: deployment.apiVersion, kind: 'Deployment', name: deployment.metadata!.name });
  });

  describe('the autoscaling metric', () => {
    let server: TestServer;
    beforeAll(async () => {
      server = await startTestServer({ server: { metrics: true } });
    });
    afterAll(async () => {
      await server?.stop();
    });

    it("is one lserve exports, renamed to the HPA's by the adapter rule", async () => {
      const metric = only('HorizontalPodAutoscaler').spec!.metrics![0]!;
      expect(metric.type).toBe('Pods');
      const config = parse(only('ConfigMap').data!['config.yaml']!) as { rules: Array<{ seriesQuery: string; name: { matches: string; as: string }; metricsQuery: string }> };
      const rule = config.rules.find((r) => r.name.as === metric.pods!.metric.name);
      expect(rule, `an adapter rule serving ${metric.pods!.metric.name}`).toBeDefined();
      const series = /^(\w+)\{/.exec(rule!.seriesQuery)?.[1];
      expect(new RegExp(rule!.name.matches).test(series!)).toBe(true);
      expect(rule!.metricsQuery).toMatch(/by \(<<\.GroupBy>>\)/);
      const exposition = await (await fetch(`${server.url}/metrics`)).text();
      expect(exposition).toContain(`# TYPE ${series} gauge`);
    });
  });
});
