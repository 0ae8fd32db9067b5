"""Where specdec puts things on a host. One place, so plan, render, roles and rollout agree."""

from __future__ import annotations

__all__ = [
    "hub_env",
    "ACCOUNT_MARK",
    "API_CA_FILE",
    "API_KEY_FILE",
    "API_KEY_OLD_FILE",
    "DOCKER_CERTS_DIR",
    "MIRROR_TLS_DIR",
    "PUBLIC_CA_DIR",
    "SITE_CA_FILE",
    "AUX_SERVICES",
    "FIREWALL_SERVICE",
    "GROUP_TLS_DIR",
    "PROXY_SERVICE",
    "PROXY_TLS_DIR",
    "CONFIG_DIR",
    "CREDENTIALS",
    "DYNAMO_VENV",
    "VLLM_CPU_VENV",
    "ETCD_SERVICE",
    "FRONTEND_SERVICE",
    "CURRENT",
    "HF_HOME",
    "LOCAL_MODELS",
    "TIKTOKEN_DIR",
    "HF_TOKEN_FILE",
    "HUB_CA_FILE",
    "IMAGE_DIGEST_FILE",
    "KEEP_RELEASES",
    "LAST_GOOD",
    "LOCK_FILE",
    "RELEASES_DIR",
    "SERVICE_NAME",
    "SERVICE_USER",
    "STATE_DIR",
    "UNIT_PATH",
    "local_model_dir",
    "release_dir",
]

SERVICE_NAME = "specdec-engine"
# NVIDIA Dynamo: on a group's frontend member, besides the worker (SERVICE_NAME), in start order.
ETCD_SERVICE = "specdec-etcd"
FRONTEND_SERVICE = "specdec-frontend"
# Every host: the firewall (nftables table inet specdec) and the API proxy in front of the engine.
FIREWALL_SERVICE = "specdec-firewall"
PROXY_SERVICE = "specdec-proxy"
# The release's units besides the engine's, in start order.
AUX_SERVICES = (FIREWALL_SERVICE, ETCD_SERVICE, FRONTEND_SERVICE, PROXY_SERVICE)
DYNAMO_VENV = "/opt/dynamo/venv"  # native runtime: ai-dynamo[vllm] installed here
VLLM_CPU_VENV = "/opt/vllm-cpu/venv"  # a CPU device's native vLLM: vllm-cpu installed here
SERVICE_USER = "specdec"
# The comment (GECOS field) of every account specdec creates: the deploy takes over an existing
# account only when it carries it (`specdec.roles.common`).
ACCOUNT_MARK = "specdec service account"
CONFIG_DIR = "/etc/specdec"
HF_TOKEN_FILE = "/etc/specdec/hf_token"  # root:root 0600; read via LoadCredential / ro bind mount
IMAGE_DIGEST_FILE = "/etc/specdec/image.digest"
API_KEY_FILE = "/etc/specdec/api_key"  # root:root 0600; LoadCredential / ro bind mount
# the key being retired after `specdec keys rotate` (empty when none): the proxy accepts both
API_KEY_OLD_FILE = "/etc/specdec/api_key.old"
PROXY_TLS_DIR = "/etc/specdec/tls/api"  # the API's certificate and key (root 0600)
MIRROR_TLS_DIR = "/etc/specdec/tls/mirror"  # a site mirror's certificate and key (root 0600)
# CA certificates, public (0644 in a 0755 directory: /etc/specdec/tls is root's only)
PUBLIC_CA_DIR = "/etc/specdec/ca"
API_CA_FILE = f"{PUBLIC_CA_DIR}/api.crt"  # signed the API's certificate: the on-host bench's
# The site's CA, on every host of a site with a mirror: the one CA its downloads through the
# mirror trust (SSL_CERT_FILE / REQUESTS_CA_BUNDLE), and Docker its registry caches
SITE_CA_FILE = f"{PUBLIC_CA_DIR}/site.crt"
# specdec_hub_ca_file: the CA a Hub endpoint or a mirror's upstream chains to, when not public
HUB_CA_FILE = f"{PUBLIC_CA_DIR}/hub.crt"
DOCKER_CERTS_DIR = "/etc/docker/certs.d"  # <host:port>/ca.crt: the CA Docker trusts there
GROUP_TLS_DIR = "/etc/specdec/tls/group"  # the serving group's CA, member cert and key
# Secrets a unit may load (LoadCredential= natively, a read-only mount under docker), by the
# credential name the unit sees. Each file is root:root 0600 on the host.
CREDENTIALS = {
    "hf_token": HF_TOKEN_FILE,
    "api_key": API_KEY_FILE,
    "api_key.old": API_KEY_OLD_FILE,
    "group-ca.crt": f"{GROUP_TLS_DIR}/ca.crt",
    "group-member.crt": f"{GROUP_TLS_DIR}/member.crt",
    "group-member.key": f"{GROUP_TLS_DIR}/member.key",
}
STATE_DIR = "/var/lib/specdec"
HF_HOME = "/var/lib/specdec/hf"  # HF cache (hub/ under it), owned by SERVICE_USER
LOCAL_MODELS = f"{HF_HOME}/local"  # --local-dir copies, for engines that need a directory
TIKTOKEN_DIR = f"{HF_HOME}/tiktoken"  # TIKTOKEN_ENCODINGS_BASE (gpt-oss's harmony encoding)
RELEASES_DIR = "/var/lib/specdec/releases"
CURRENT = "/var/lib/specdec/current"  # symlink -> releases/<id>
LAST_GOOD = "/var/lib/specdec/last-good"  # symlink -> releases/<id>
LOCK_FILE = "/var/lib/specdec/deploy.lock"
UNIT_PATH = f"/etc/systemd/system/{SERVICE_NAME}.service"
KEEP_RELEASES = 5


def release_dir(release_id: str) -> str:
    return f"{RELEASES_DIR}/{release_id}"


def local_model_dir(repo: str) -> str:
    """Where ``hf download REPO --local-dir`` puts a repo for engines that need a directory."""
    return f"{LOCAL_MODELS}/{repo.replace('/', '--')}"


def hub_env() -> list[tuple[str, str]]:
    """Every variable through which an image may point the Hub cache elsewhere, set to the host
    cache. huggingface_hub (constants.py) reads HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE, then
    HF_HOME/hub; transformers reads TRANSFORMERS_CACHE; jetson-containers images set the last
    three to /data/models/huggingface (packages/llm/huggingface_hub/Dockerfile), which would
    otherwise win over HF_HOME."""
    hub = f"{HF_HOME}/hub"
    return [("HF_HOME", HF_HOME), ("HF_HUB_CACHE", hub), ("HUGGINGFACE_HUB_CACHE", hub),
            ("TRANSFORMERS_CACHE", hub)]
