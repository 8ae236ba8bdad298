// Pure policy: rule validation (the API's 400s name the field), address
// classification, and the profile AND declaration decision.
import t from 'tap';
import { parseCidr, parseIp, specialRange } from '../../egress-proxy/address.js';
import { checkDestination, compilePolicy } from '../../egress-proxy/allowlist.js';
import { checkDeclarationEntry, checkMcpPolicy, checkRule } from '../../egress-proxy/index.js';

const problem = (r: ReturnType<typeof checkRule> | ReturnType<typeof checkDeclarationEntry>) =>
  r.ok ? null : r.problem;

t.test('rule validation names the field', async (t) => {
  t.match(problem(checkRule({ kind: 'cidr_v4', value: '10.0.0.0/33', port: 443 })), {
    field: 'value',
    message: /^value: .*CIDR/,
  });
  t.match(problem(checkRule({ kind: 'cidr_v4', value: '10.0.0.1/8', port: 443 })), {
    field: 'value',
    message: /host bits/,
  });
  t.match(problem(checkRule({ kind: 'cidr_v6', value: '10.0.0.0/8', port: 443 })), { field: 'value' });
  t.match(problem(checkRule({ kind: 'domain', value: 'api.example.com', port: 0 })), {
    field: 'port',
    message: /^port: /,
  });
  t.match(problem(checkRule({ kind: 'domain', value: 'api.example.com', port: 70000 })), { field: 'port' });
  t.match(problem(checkRule({ kind: 'domain', value: 'api.example.com', port: 44.5 })), { field: 'port' });
  t.match(problem(checkRule({ kind: 'domain', value: 'api.example.com', port: '443' })), { field: 'port' });
  t.match(problem(checkRule({ kind: 'domain', value: 'bad host.com', port: 443 })), {
    field: 'value',
    message: /whitespace/,
  });
  t.match(problem(checkRule({ kind: 'domain', value: '10.1.2.3', port: 443 })), { field: 'value', message: /ip_v4/ });
  t.match(problem(checkRule({ kind: 'domain', value: 'ünicode.example', port: 443 })), {
    field: 'value',
    message: /punycode/,
  });
  t.match(problem(checkRule({ kind: 'domain', value: '-bad.example', port: 443 })), { field: 'value' });
  t.match(problem(checkRule({ kind: 'ip_v4', value: '::1', port: 443 })), { field: 'value' });
  t.match(problem(checkRule({ kind: 'url', value: 'x', port: 443 })), { field: 'kind' });
  t.match(problem(checkRule(null)), { field: 'rule' });
});

t.test('rule validation normalizes good values', async (t) => {
  t.same(checkRule({ kind: 'domain', value: 'API.Example.COM.', port: 443 }), {
    ok: true,
    value: { kind: 'domain', value: 'api.example.com', port: 443 },
  });
  t.same(checkRule({ kind: 'ip_v6', value: '2001:DB8:0:0:0:0:0:1', port: 443 }), {
    ok: true,
    value: { kind: 'ip_v6', value: '2001:db8::1', port: 443 },
  });
  t.same(checkRule({ kind: 'cidr_v6', value: 'fd00::/8', port: 1 }), {
    ok: true,
    value: { kind: 'cidr_v6', value: 'fd00::/8', port: 1 },
  });
  t.ok(checkRule({ kind: 'domain', value: '*.example.com', port: 65535 }).ok);
});

t.test('declaration entries: hostname, IP or CIDR; problems name the index', async (t) => {
  t.ok(checkDeclarationEntry('api.example.com', 0).ok);
  t.ok(checkDeclarationEntry('203.0.113.0/24', 0).ok);
  t.ok(checkDeclarationEntry('2001:db8::1', 0).ok);
  t.match(problem(checkDeclarationEntry('bad host', 3)), { field: 'egress_declaration[3]' });
  t.match(problem(checkDeclarationEntry('10.0.0.0/40', 1)), { field: 'egress_declaration[1]' });
  t.match(problem(checkDeclarationEntry('', 0)), { field: 'egress_declaration[0]' });
});

t.test('mcp_policy shape check names the field', async (t) => {
  t.ok(checkMcpPolicy({ allowed_tools: ['a'] }).ok);
  t.match(checkMcpPolicy({ allowed_tools: 'a' }), { ok: false, field: 'mcp_policy.allowed_tools' });
  t.match(checkMcpPolicy({ prohibited_tools: ['ok', 3] }), { ok: false, field: 'mcp_policy.prohibited_tools[1]' });
});

t.test('special ranges, including IPv4-mapped IPv6 and metadata', async (t) => {
  const kind = (s: string) => specialRange(parseIp(s)!)?.kind ?? null;
  t.equal(kind('127.0.0.1'), 'loopback');
  t.equal(kind('127.255.0.9'), 'loopback');
  t.equal(kind('::1'), 'loopback');
  t.equal(kind('::ffff:127.0.0.1'), 'loopback', 'mapped v4 is the v4 host');
  t.equal(kind('169.254.169.254'), 'metadata');
  t.equal(kind('::ffff:169.254.169.254'), 'metadata');
  t.equal(kind('fd00:ec2::254'), 'metadata');
  t.equal(kind('169.254.1.1'), 'link_local');
  t.equal(kind('fe80::1'), 'link_local');
  t.equal(kind('0.0.0.0'), 'unspecified');
  t.equal(kind('::'), 'unspecified');
  t.equal(kind('224.0.0.1'), 'multicast');
  t.equal(kind('ff02::1'), 'multicast');
  t.equal(kind('255.255.255.255'), 'broadcast');
  t.equal(kind('93.184.216.34'), null);
  t.equal(kind('2001:db8::1'), null);
  t.equal(parseIp('fe80::1%eth0'), null, 'zone ids refused');
  t.equal(typeof parseCidr('1.2.3.0/24'), 'object');
});

t.test('decision: profile AND declaration, port exact, wildcard subdomains', async (t) => {
  const p = compilePolicy(
    [
      { kind: 'domain', value: 'api.example.com', port: 443 },
      { kind: 'domain', value: '*.svc.example.com', port: 443 },
      { kind: 'cidr_v4', value: '203.0.113.0/24', port: 8443 },
      { kind: 'domain', value: 'only-profile.example.com', port: 443 },
    ],
    ['api.example.com', '*.svc.example.com', '203.0.113.0/25'],
  );
  const pub = parseIp('198.51.100.1')!;
  const d = (host: string, port: number, address = pub) =>
    checkDestination(p, { host, hostIsIp: !!parseIp(host), port, address });
  t.equal(d('api.example.com', 443), null);
  t.same(d('api.example.com', 444), { reason: 'not_in_profile' });
  t.equal(d('a.svc.example.com', 443), null);
  t.equal(d('a.b.svc.example.com', 443), null);
  t.same(d('svc.example.com', 443), { reason: 'not_in_profile' }, 'wildcard does not match the bare name');
  t.same(d('only-profile.example.com', 443), { reason: 'not_in_declaration' });
  t.equal(d('203.0.113.5', 8443, parseIp('203.0.113.5')!), null);
  t.same(d('203.0.113.200', 8443, parseIp('203.0.113.200')!), { reason: 'not_in_declaration' });
  t.same(d('198.51.100.1', 443), { reason: 'not_in_profile' }, 'direct IP bypass of a domain rule');
  t.same(
    d('api.example.com', 443, parseIp('127.0.0.1')!),
    { reason: 'special_address', kind: 'loopback' },
    'allowed name resolving to loopback',
  );
  t.same(d('api.example.com', 443, parseIp('169.254.169.254')!), { reason: 'special_address', kind: 'metadata' });
  t.same(d('api.example.com', 443, parseIp('::ffff:10.0.0.1')!), null, 'mapped private address is ordinary');
});

t.test('special addresses need an explicit naming in both lists; broad CIDRs do not unlock them', async (t) => {
  const lo = parseIp('127.0.0.1')!;
  const broad = compilePolicy([{ kind: 'cidr_v4', value: '0.0.0.0/0', port: 80 }], ['0.0.0.0/0']);
  t.same(checkDestination(broad, { host: '127.0.0.1', hostIsIp: true, port: 80, address: lo }), {
    reason: 'special_address',
    kind: 'loopback',
  });
  const named = compilePolicy([{ kind: 'ip_v4', value: '127.0.0.1', port: 80 }], ['127.0.0.0/8']);
  t.equal(checkDestination(named, { host: '127.0.0.1', hostIsIp: true, port: 80, address: lo }), null);
  const onlyProfile = compilePolicy([{ kind: 'ip_v4', value: '127.0.0.1', port: 80 }], ['0.0.0.0/0']);
  t.same(checkDestination(onlyProfile, { host: '127.0.0.1', hostIsIp: true, port: 80, address: lo }), {
    reason: 'special_address',
    kind: 'loopback',
  });
  const meta = compilePolicy([{ kind: 'cidr_v4', value: '169.254.0.0/16', port: 80 }], ['169.254.0.0/16']);
  t.same(
    checkDestination(meta, { host: '169.254.169.254', hostIsIp: true, port: 80, address: parseIp('169.254.169.254')! }),
    { reason: 'special_address', kind: 'metadata' },
    'a link-local CIDR does not unlock the metadata address: that needs the exact IP',
  );
  t.equal(
    checkDestination(meta, { host: '169.254.1.1', hostIsIp: true, port: 80, address: parseIp('169.254.1.1')! }),
    null,
    'a CIDR inside the link-local range names link-local addresses explicitly',
  );
  const exact = compilePolicy([{ kind: 'ip_v4', value: '169.254.169.254', port: 80 }], ['169.254.169.254']);
  t.equal(
    checkDestination(exact, {
      host: '169.254.169.254',
      hostIsIp: true,
      port: 80,
      address: parseIp('169.254.169.254')!,
    }),
    null,
  );
});

t.test('invalid config rules throw at compile time', async (t) => {
  t.throws(() => compilePolicy([{ kind: 'domain', value: 'a b', port: 1 }], []), /profileRules\[0\]\.value/);
  t.throws(() => compilePolicy([], ['10.0.0.0/99']), /egress_declaration\[0\]/);
});
