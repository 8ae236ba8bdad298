// The Kubernetes install (deploy/kubernetes, Kustomize): rendered by kubectl
// as an operator would (`kubectl kustomize`), every object validated against
// the Kubernetes API schemas (kubernetes-models 4.4, Kubernetes 1.27: an
// object valid there uses only fields that 1.28 and later serve), and the
// properties a security reviewer checks asserted one by one.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { Namespace, ConfigMap, Service } from 'kubernetes-models/v1';
import { Deployment, DaemonSet } from 'kubernetes-models/apps/v1';
import { Job } from 'kubernetes-models/batch/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const BASE = `${ROOT}/deploy/kubernetes`;
type Obj = Record<string, any>;

const MODELS: Record<string, new (o: Obj) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/DaemonSet': DaemonSet,
  'batch/v1/Job': Job,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });

t.test(
  'deploy/kubernetes renders and validates',
  { skip: kubectl.status !== 0 ? 'no kubectl on PATH' : false },
  async (t) => {
    const r = spawnSync('kubectl', ['kustomize', BASE], { encoding: 'utf8' });
    t.equal(r.status, 0, r.stderr);
    const objs: Obj[] = parseAllDocuments(r.stdout).map((d) => d.toJS() as Obj);
    const kinds = objs.map((o) => `${o.apiVersion}/${o.kind}`);
    for (const o of objs) {
      const Model = MODELS[`${o.apiVersion}/${o.kind}`];
      t.ok(Model, `${o.kind} ${o.metadata?.name}: an API the base may use`);
      if (!Model) continue;
      try {
        new Model(o).validate();
        t.pass(`${o.kind} ${o.metadata.name} valid against the API schema`);
      } catch (e) {
        t.fail(`${o.kind} ${o.metadata.name}: ${(e as Error).message}`);
      }
      if (o.kind !== 'Namespace') t.equal(o.metadata.namespace, 'capsule', `${o.kind} ${o.metadata.name} in capsule`);
    }
    const one = (kind: string, name: string): Obj => {
      const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
      if (!o) throw new Error(`no ${kind} ${name} in ${kinds.join(', ')}`);
      return o;
    };
    const cp = one('Deployment', 'capsule-control-plane');
    const api = cp.spec.template.spec.containers[0];
    t.ok(cp.spec.replicas >= 2, 'at least two control-plane replicas');
    t.equal(api.readinessProbe.httpGet.path, '/v1/health/ready');
    t.equal(api.livenessProbe.httpGet.path, '/v1/health');
    t.same(api.securityContext.capabilities.drop, ['ALL'], 'the API drops every capability');
    t.equal(api.securityContext.readOnlyRootFilesystem, true);
    t.equal(cp.spec.template.spec.securityContext.runAsNonRoot, true);
    const pdb = one('PodDisruptionBudget', 'capsule-control-plane');
    t.same(pdb.spec.selector.matchLabels, cp.spec.selector.matchLabels, 'the PDB covers the control plane');
    t.ok(pdb.spec.minAvailable >= 1);
    const config = one('ConfigMap', 'capsule-config').data as Record<string, string>;
    t.ok(
      cp.spec.template.spec.terminationGracePeriodSeconds * 1000 > Number(config.CAPSULE_SHUTDOWN_GRACE_MS),
      'the pod grace period outlasts the shutdown grace',
    );
    t.match(config.CAPSULE_RUNNERS, /^dns:capsule-runner\.capsule\.svc\.cluster\.local:7443$/);

    const ds = one('DaemonSet', 'capsule-runner').spec.template.spec;
    t.equal(ds.hostPID, false, 'runner: hostPID off');
    t.equal(ds.hostNetwork, false, 'runner: host network off');
    t.same(ds.nodeSelector, { 'capsule.dev/capsule-node': 'true' }, 'runner only on labelled capsule nodes');
    t.notOk(
      (ds.volumes as Obj[]).some((v) => v.hostPath),
      'runner mounts nothing from the host (its cgroup namespace only)',
    );
    const runnerSvc = one('Service', 'capsule-runner');
    t.equal(runnerSvc.spec.clusterIP, 'None', 'runner Service is headless (dns: discovery)');

    const np = one('NetworkPolicy', 'capsule-runner');
    t.same(np.spec.podSelector.matchLabels, { 'app.kubernetes.io/name': 'capsule-runner' });
    t.same(
      np.spec.ingress,
      [
        {
          from: [{ podSelector: { matchLabels: cp.spec.selector.matchLabels } }],
          ports: [{ protocol: 'TCP', port: 7443 }],
        },
      ],
      'the runner port admits control-plane pods only',
    );

    const job = one('Job', 'capsule-migrate');
    t.same(job.spec.template.spec.containers[0].command.slice(-2), ['admin', 'migrate'], 'a migration Job');

    // Secrets: referenced by name, never shipped; each name documented for the operator.
    t.notOk(kinds.includes('v1/Secret'), 'the base ships no Secret');
    const guide = readFileSync(`${ROOT}/docs/SELF_HOSTING.md`, 'utf8');
    const referenced = new Set<string>();
    const walk = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        const o = v as Obj;
        if (typeof o.secretName === 'string') referenced.add(o.secretName);
        if (o.secretKeyRef?.name) referenced.add(o.secretKeyRef.name);
        Object.values(o).forEach(walk);
      }
    };
    walk(objs);
    t.ok(referenced.size >= 5, `secrets referenced: ${[...referenced].join(', ')}`);
    for (const s of referenced) t.ok(guide.includes(`\`${s}\``), `docs/SELF_HOSTING.md names the secret ${s}`);
    t.notOk(/password|BEGIN [A-Z ]*PRIVATE KEY/i.test(r.stdout), 'no inline credential in the rendered base');
    for (const o of objs)
      for (const c of o.spec?.template?.spec?.containers ?? [])
        t.match(c.image, /^capsule:/, `${o.metadata.name}: the capsule image (retargeted with kustomize images)`);
  },
);

t.test('capsule admin migrate (the migration Job) applies the schema and exits', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(`${tmpdir()}/migrate-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cli = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
  const env = { PATH: process.env.PATH, CAPSULE_DATA_DIR: dir };
  const first = spawnSync(process.execPath, [cli, 'admin', 'migrate'], { env, encoding: 'utf8' });
  t.equal(first.status, 0, first.stderr);
  t.match(first.stdout, /database schema up to date \(\d+ migrations applied\)/);
  const again = spawnSync(process.execPath, [cli, 'admin', 'migrate'], { env, encoding: 'utf8' });
  t.equal(again.status, 0, 'a second run finds nothing to do');
  const bad = spawnSync(process.execPath, [cli, 'admin', 'migrate', 'extra'], { env, encoding: 'utf8' });
  t.equal(bad.status, 2, 'extra arguments refused');
});
