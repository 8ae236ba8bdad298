// SQLite (libsql) prepares every statement from its text; preparing costs
// more than running the short statements the store issues per request
// (measured: about 2.1 s of 19 s of the API's busy time in a soak). Texts
// that repeat (parameterized raw statements, begin/commit) keep their
// prepared statement here.
//
// WARNING: a cached statement is shared by every caller with the same text.
// That is safe only because libsql's all/run are synchronous and every query
// runs under the dialect's connection mutex; a caller iterating a statement
// lazily (streaming) would be reset by the next use of that text. The store
// never streams.

/** The prepare method of a libsql Database. */
interface Preparer {
  prepare(sql: string): unknown;
}

/** Texts longer than this are not kept: MikroORM inlines values (customer data among them) into its own statements. */
const MAX_TEXT = 2048;

/** Wraps db.prepare with a least-recently-used cache of at most `max` statements. */
export function cacheStatements(db: Preparer, max = 256): void {
  const prepare = db.prepare.bind(db);
  const cache = new Map<string, unknown>();
  db.prepare = (sql: string): unknown => {
    if (sql.length > MAX_TEXT) return prepare(sql);
    const hit = cache.get(sql);
    if (hit !== undefined) {
      cache.delete(sql);
      cache.set(sql, hit);
      return hit;
    }
    const stmt = prepare(sql);
    if (cache.size >= max) cache.delete(cache.keys().next().value!);
    cache.set(sql, stmt);
    return stmt;
  };
}
