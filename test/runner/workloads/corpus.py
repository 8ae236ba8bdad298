# Seccomp corpus: what customers run with python3. Prints one line per check
# and PY-OK at the end; any failure raises (non-zero exit).
import csv, hashlib, io, json, multiprocessing, os, shutil, socket, sqlite3, ssl, subprocess, sys, tempfile, threading, zipfile

d = tempfile.mkdtemp()
p = os.path.join(d, "a.json")
with open(p, "w") as f:
    json.dump({"n": [1, 2, 3]}, f)
with open(p) as f:
    print("json", sum(json.load(f)["n"]))

buf = io.StringIO()
csv.writer(buf).writerows([["a", "b"], ["1", "2"]])
with open(os.path.join(d, "t.csv"), "w", newline="") as f:
    f.write(buf.getvalue())
with open(os.path.join(d, "t.csv"), newline="") as f:
    print("csv", list(csv.reader(f))[1])

print("subprocess", subprocess.run(["sh", "-c", "echo $((6*7))"], capture_output=True, text=True, check=True).stdout.strip())
print("subprocess-pipe", subprocess.check_output("printf 'b\\na\\n' | sort | head -n 1", shell=True, text=True).strip())

out = []
lock = threading.Lock()
def work(i):
    with lock:
        out.append(i * i)
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("threads", sum(out))

def sq(x):
    return x * x
if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        print("multiprocessing", sum(pool.map(sq, range(10))))
    q = multiprocessing.Queue()
    pr = multiprocessing.Process(target=q.put, args=("from-child",))
    pr.start(); print("process", q.get(timeout=10)); pr.join()

db = sqlite3.connect(os.path.join(d, "x.db"))
db.execute("create table t(k integer primary key, v text)")
with db:
    db.executemany("insert into t(v) values (?)", [("a",), ("b",), ("c",)])
print("sqlite", db.execute("select count(*), group_concat(v) from t").fetchone())
db.close()

with open(os.path.join(d, "tmp"), "w") as f:
    f.write("v2")
    f.flush()
    print("fsync", os.fsync(f.fileno()) or f.tell())
print("pid", os.getpid() > 1, os.getppid() >= 0)
os.replace(os.path.join(d, "tmp"), os.path.join(d, "final"))
os.rename(os.path.join(d, "final"), os.path.join(d, "final2"))
os.symlink("final2", os.path.join(d, "ln"))
os.chmod(os.path.join(d, "final2"), 0o700)
os.link(os.path.join(d, "final2"), os.path.join(d, "hard"))
shutil.copy(os.path.join(d, "hard"), os.path.join(d, "copy"))
with open(os.path.join(d, "copy"), "r+") as f:
    f.truncate(1)
print("chmod-link-copy", oct(os.stat(os.path.join(d, "hard")).st_mode & 0o777), os.readlink(os.path.join(d, "ln")), open(os.path.join(d, "copy")).read())
for n in ("hard", "copy"):
    os.unlink(os.path.join(d, n))
print("rename", open(os.path.join(d, "ln")).read(), sorted(os.listdir(d)))

with tempfile.NamedTemporaryFile("w+", dir=d) as tf:
    tf.write("temp"); tf.flush(); tf.seek(0)
    print("tempfile", tf.read())

print("hashlib", hashlib.sha256(b"abc").hexdigest()[:16], hashlib.sha512(b"abc").hexdigest()[:8])

zp = os.path.join(d, "z.zip")
with zipfile.ZipFile(zp, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("in.txt", "zipped " * 100)
with zipfile.ZipFile(zp) as z:
    print("zipfile", z.namelist(), len(z.read("in.txt")))

srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(1)
def serve():
    c, _ = srv.accept()
    c.sendall(c.recv(100).upper()); c.close()
th = threading.Thread(target=serve); th.start()
cl = socket.create_connection(srv.getsockname(), timeout=5)
cl.sendall(b"ping"); print("socket", cl.recv(100).decode()); cl.close(); th.join(); srv.close()

ctx = ssl.create_default_context()
print("ssl", ctx.verify_mode == ssl.CERT_REQUIRED, ssl.OPENSSL_VERSION.split()[0])

shutil.rmtree(d)
print("PY-OK")
