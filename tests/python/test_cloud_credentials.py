"""Credentials found the way a cluster provides them, against a real S3-compatible server.

One moto server on loopback serves S3, IAM and STS over TLS (a certificate made here for
127.0.0.1, trusted through SSL_CERT_FILE as a cloud's CA would be) and checks every request's
signature once its first three requests (creating an IAM user and its key) are served. Each
case runs sluice in a fresh subprocess whose environment holds only what that credential
source sets: a credentials file and profile, a web identity token (EKS IRSA), a container
credentials endpoint (ECS/EKS Pod Identity) or an instance metadata endpoint (EC2), the last
two served by small servers in this module.
"""

from __future__ import annotations

import datetime
import http.server
import io
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from procs import run_cmd

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")
Image = pytest.importorskip("PIL.Image")

from test_object_store import _free_port  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
BUCKET = "cred-bucket"
CLASSES = {"cat": 3, "dog": 2}


def _cert(tmp):
    """A CA (what SSL_CERT_FILE trusts) and a server certificate for 127.0.0.1 it signed
    (TLS verifiers refuse a CA certificate used as the server's own)."""
    ca, ca_key, cert, key, csr = (tmp / n for n in ("ca.pem", "ca-key.pem", "cert.pem", "key.pem", "req.csr"))
    ext = tmp / "ext.cnf"
    ext.write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    for cmd in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sluice test CA", "-keyout", ca_key, "-out", ca],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", cert],
    ):
        subprocess.run(["openssl", *map(str, cmd)], check=True, capture_output=True, timeout=60)
    return ca, cert, key


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cloud")
    try:
        ca, cert, key = _cert(tmp)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"openssl cannot make a certificate: {e}")
    port = _free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3", "AWS_ACCESS_KEY_ID": "setup", "AWS_SECRET_ACCESS_KEY": "setup"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port), "-c", str(cert), "-k", str(key)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip("moto server did not start")
                time.sleep(0.1)
        common = {"endpoint_url": endpoint, "verify": str(ca), "region_name": "us-east-1"}
        iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **common)
        iam.create_user(UserName="trainer")
        k = iam.create_access_key(UserName="trainer")["AccessKey"]
        allow_all = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
        iam.put_user_policy(UserName="trainer", PolicyName="all", PolicyDocument=allow_all)
        keys = {"aws_access_key_id": k["AccessKeyId"], "aws_secret_access_key": k["SecretAccessKey"]}
        iam = boto3.client("iam", **keys, **common)
        trust = json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:user/trainer"}, "Action": "sts:AssumeRole"}]})
        role = iam.create_role(RoleName="reader", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        iam.put_role_policy(RoleName="reader", PolicyName="all", PolicyDocument=allow_all)
        # Temporary credentials, as STS, a container endpoint or IMDS hand out.
        sts = boto3.client("sts", **keys, **common)
        c = sts.assume_role(RoleArn=role, RoleSessionName="node")["Credentials"]
        temporary = {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"], "Token": c["SessionToken"]}
        s3 = boto3.client("s3", **keys, **common)
        s3.create_bucket(Bucket=BUCKET)
        local = tmp / "train"
        for cls, n in CLASSES.items():
            (local / cls).mkdir(parents=True)
            for i in range(n):
                buf = io.BytesIO()
                Image.new("RGB", (20 + i, 16), (40 * i, 100, 200)).save(buf, "PNG")
                (local / cls / f"{i}.png").write_bytes(buf.getvalue())
                s3.put_object(Bucket=BUCKET, Key=f"train/{cls}/{i}.png", Body=buf.getvalue())
        yield {"temporary": temporary, "endpoint": endpoint, "cert": str(ca), "server_cert": str(cert), "server_key": str(key), "keys": keys, "role": role, "tmp": tmp, "local": local}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


READ = """
import sluice
ds = sluice.read_images("s3://cred-bucket/train/", labels="parent_dir")
print(ds.class_names, sorted((s["path"].split("/", 3)[3], s["label"], len(s["bytes"])) for s in ds))
"""


def _clean_env(cloud, home, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}
    env.update({"HOME": str(home), "SSL_CERT_FILE": cloud["cert"], "AWS_ENDPOINT_URL": cloud["endpoint"]})
    # Nothing may reach a real metadata service from a test.
    env.setdefault("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9")
    env.update(extra)
    return env


def _expected(cloud):
    local = cloud["local"]
    rows = sorted((f"train/{c}/{p.name}", ["cat", "dog"].index(c), p.stat().st_size) for c in CLASSES for p in (local / c).iterdir())
    return f"['cat', 'dog'] {rows}"


def run_py(code, timeout, env, check=True):
    """Runs `code` in a fresh interpreter with exactly `env`; its stdout (and stderr when
    `check=False`)."""
    r = run_cmd([sys.executable, "-c", code], timeout=timeout, env=env)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout
    return r.stdout + r.stderr


def _read(cloud, env, code=READ):
    return run_py(code, timeout=120, env=env)


def test_credentials_file_profile_and_region_from_config(cloud, tmp_path):
    aws = tmp_path / ".aws"
    aws.mkdir()
    k = cloud["keys"]
    (aws / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAWRONG\naws_secret_access_key = wrong\n\n"
        f"[training]\naws_access_key_id = {k['aws_access_key_id']}\naws_secret_access_key = {k['aws_secret_access_key']}\n"
    )
    (aws / "config").write_text("[profile training]\nregion = us-east-1\n")
    env = _clean_env(cloud, tmp_path, AWS_PROFILE="training")
    assert _read(cloud, env).strip() == _expected(cloud)
    # The default profile's key is refused by the server: the error says where sluice looked.
    env = _clean_env(cloud, tmp_path)
    out = run_py(READ.replace("print(", "x = (") + "\n", timeout=120, env=env, check=False)
    assert "access denied" in out and "profile 'default'" in out and "(used)" in out, out


class _Creds(http.server.BaseHTTPRequestHandler):
    """Serves temporary credentials as the ECS/EKS container endpoint and EC2's IMDSv2 do."""

    keys: dict = {}
    token = ""
    seen: list = []

    def log_message(self, *a):  # noqa: D102 - quiet
        pass

    def _json(self, body):
        data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _creds(self):
        exp = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {**self.keys, "Expiration": exp, "Code": "Success"}

    def do_POST(self):  # noqa: N802 - STS AssumeRoleWithWebIdentity
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        form = dict(urllib.parse.parse_qsl(body or urllib.parse.urlsplit(self.path).query))
        type(self).seen.append(("POST", form.get("Action")))
        if form.get("Action") != "AssumeRoleWithWebIdentity" or form.get("WebIdentityToken") != self.token:
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        c = self._creds()
        self._json(
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{c['AccessKeyId']}</AccessKeyId><SecretAccessKey>{c['SecretAccessKey']}</SecretAccessKey>"
            f"<SessionToken>{c['Token']}</SessionToken><Expiration>{c['Expiration']}</Expiration>"
            "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
        )

    def do_PUT(self):  # noqa: N802 - IMDSv2 session token
        type(self).seen.append(("PUT", self.path))
        self._json("imds-session")

    def do_GET(self):  # noqa: N802
        type(self).seen.append(("GET", self.path))
        if self.path == "/container":
            if self.headers.get("Authorization") != self.token:
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._json(self._creds())
        elif self.path == "/latest/meta-data/iam/security-credentials/":
            self._json("node-role")
        elif self.path == "/latest/meta-data/iam/security-credentials/node-role":
            self._json(self._creds())
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


def _serve(cloud, tls=False):
    _Creds.keys, _Creds.token, _Creds.seen = cloud["temporary"], "pod-token", []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Creds)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cloud["server_cert"], cloud["server_key"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"{'https' if tls else 'http'}://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def creds_server(cloud):
    srv, url = _serve(cloud)
    yield url
    srv.shutdown()


def test_web_identity_token_as_eks_sets_it(cloud, tmp_path):
    """EKS IRSA: a projected token file and a role; the token is exchanged at STS (here a
    simulated STS endpoint on loopback TLS, as object_store requires HTTPS for it)."""
    srv, sts = _serve(cloud, tls=True)
    try:
        token = tmp_path / "token"
        token.write_text("pod-token")
        env = _clean_env(
            cloud, tmp_path,
            AWS_WEB_IDENTITY_TOKEN_FILE=str(token), AWS_ROLE_ARN="arn:aws:iam::123456789012:role/reader",
            AWS_ENDPOINT_URL_STS=sts, AWS_REGION="us-east-1",
        )
        assert _read(cloud, env).strip() == _expected(cloud)
        assert ("POST", "AssumeRoleWithWebIdentity") in _Creds.seen
        # A token the endpoint refuses is an error naming the lookup used.
        token.write_text("stolen")
        out = run_py(READ, timeout=120, env=env, check=False)
        assert "web identity: token file" in out and "(used)" in out, out
    finally:
        srv.shutdown()


def test_container_credentials_endpoint(cloud, creds_server, tmp_path):
    (tmp_path / "pod-token").write_text("pod-token")
    env = _clean_env(
        cloud, tmp_path,
        AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{creds_server}/container",
        AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(tmp_path / "pod-token"),
    )
    assert _read(cloud, env).strip() == _expected(cloud)
    assert ("GET", "/container") in _Creds.seen


def test_instance_metadata_last(cloud, creds_server, tmp_path):
    env = _clean_env(cloud, tmp_path, AWS_METADATA_ENDPOINT=creds_server)
    assert _read(cloud, env).strip() == _expected(cloud)
    assert ("PUT", "/latest/api/token") in _Creds.seen


def test_explicit_options_and_unknown_keys(cloud, tmp_path):
    k = cloud["keys"]
    code = f"""
import sluice
sluice.configure_storage("s3://", endpoint={cloud['endpoint']!r})
sluice.configure_storage("s3://cred-bucket", access_key_id={k['aws_access_key_id']!r},
                         secret_access_key={k['aws_secret_access_key']!r})
try:
    sluice.configure_storage("s3://cred-bucket", colour="red")
except ValueError as e:
    print("refused:", e)
""" + READ.split("import sluice", 1)[1]
    env = _clean_env(cloud, tmp_path)
    del env["AWS_ENDPOINT_URL"]
    out = run_py(code, timeout=120, env=env).strip().splitlines()
    assert out[0].startswith("refused:") and "unknown option 'colour'" in out[0]
    assert out[1] == _expected(cloud)


def test_no_credentials_anywhere_lists_every_lookup(cloud, tmp_path):
    env = _clean_env(cloud, tmp_path)
    code = """
import sluice
try:
    sluice.read_images("s3://cred-bucket/train/")
except OSError as e:
    print(e)
"""
    out = run_py(code, timeout=120, env=env)
    for lookup in ("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY not set", "AWS_WEB_IDENTITY_TOKEN_FILE/AWS_ROLE_ARN not set",
                   "profile 'default': no keys in", "AWS_CONTAINER_CREDENTIALS_* not set", "instance metadata at http://127.0.0.1:9"):
        assert lookup in out, out


class _GceMetadata(http.server.BaseHTTPRequestHandler):
    """GCE's metadata server (GKE workload identity answers the same): an access token for
    the default service account, only to requests carrying `Metadata-Flavor: Google`."""

    seen: list = []

    def log_message(self, *a):  # noqa: D102 - quiet
        pass

    def do_GET(self):  # noqa: N802
        type(self).seen.append(self.path)
        ok = self.headers.get("Metadata-Flavor") == "Google"
        if ok and self.path.startswith("/computeMetadata/v1/instance/service-accounts/default/token"):
            body = json.dumps({"access_token": "gke-token", "expires_in": 3600, "token_type": "Bearer"}).encode()
            self.send_response(200)
        else:
            body = b""
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_gcs_token_from_the_metadata_server(cloud, tmp_path):
    """GCS with no key anywhere: the token comes from the metadata server (here simulated on
    loopback), and the bucket (a fake speaking GCS's XML API, benchmarks/s3_server.py) answers
    only requests bearing it."""
    _GceMetadata.seen = []
    meta = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GceMetadata)
    threading.Thread(target=meta.serve_forever, daemon=True).start()
    port = _free_port()
    root = tmp_path / "bucket"
    root.mkdir()
    (root / "train").symlink_to(cloud["local"])
    server = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "s3_server.py"), str(root), "--port", str(port),
                               "--bearer", "gke-token"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "fake GCS did not start"
                time.sleep(0.1)
        env = _clean_env(cloud, tmp_path, GOOGLE_BASE_URL=f"http://127.0.0.1:{port}",
                         GCE_METADATA_HOST=f"127.0.0.1:{meta.server_address[1]}",
                         GCE_METADATA_IP=f"127.0.0.1:{meta.server_address[1]}")
        out = run_py(READ.replace("s3://cred-bucket", "gs://any-bucket"), timeout=120, env=env)
        assert out.strip() == _expected(cloud)
        assert any("service-accounts/default/token" in p for p in _GceMetadata.seen)
        # Without the metadata server the error lists every GCS lookup.
        env["GCE_METADATA_HOST"] = env["GCE_METADATA_IP"] = "127.0.0.1:9"
        out = run_py(READ.replace("s3://cred-bucket", "gs://any-bucket"), timeout=120, env=env, check=False)
        assert "GOOGLE_APPLICATION_CREDENTIALS/GOOGLE_BEARER_TOKEN not set" in out and "metadata server" in out, out
    finally:
        server.terminate()
        server.wait(timeout=10)
        meta.shutdown()
