// The SQLite statement cache (control-plane/store/statement-cache.ts) on a
// real libsql database: repeated texts reuse their statement, the least
// recently used leaves first, long texts (inlined values) are never kept, and
// a reused statement gives the same answers as a fresh one.
import t from 'tap';
import Database from 'libsql';
import { cacheStatements } from '../../control-plane/store/statement-cache.js';

t.test('repeated texts share one prepared statement, bounded, least recently used first', async (t) => {
  const db = new Database(':memory:');
  db.exec('create table kv (k text primary key, v integer)');
  let prepared = 0;
  const raw = db.prepare.bind(db);
  db.prepare = ((sql: string) => {
    prepared++;
    return raw(sql);
  }) as typeof db.prepare;
  cacheStatements(db as unknown as Parameters<typeof cacheStatements>[0], 2);

  const ins = 'insert into kv (k, v) values (?, ?)';
  for (let i = 0; i < 5; i++) db.prepare(ins).run([`k${i}`, i]);
  t.equal(prepared, 1, 'one prepare for five inserts of the same text');
  const sel = 'select v from kv where k = ?';
  t.same(db.prepare(sel).all(['k3']), [{ v: 3 }]);
  t.same(db.prepare(sel).all(['k4']), [{ v: 4 }], 'a reused statement binds the new values');
  t.equal(prepared, 2);

  db.prepare(ins); // now most recent: sel is the oldest
  db.prepare('select count(*) as n from kv'); // a third text evicts sel
  t.equal(prepared, 3);
  db.prepare(ins);
  t.equal(prepared, 3, 'the recently used text stayed');
  db.prepare(sel);
  t.equal(prepared, 4, 'the least recently used text had left');

  const long = `select '${'x'.repeat(3000)}' as s`;
  db.prepare(long);
  db.prepare(long);
  t.equal(prepared, 6, 'a long text (inlined values) is prepared each time, never kept');
  db.prepare(sel);
  t.equal(prepared, 6, 'and it evicted nothing');
  db.close();
});
