"""Render a plan into exact files, offline: `files` (`render(plan) -> Rendered`: the engine
unit, its environment, the engine's config file and release files), `unitfile` (``ExecStart=``
quoting, ``Environment=`` values, the Jinja templates) and `sandbox` (systemd hardening) — these
two are shared vocabulary the engines render with — `firewall` (the nftables table), `proxy`
(the API proxy's nginx) and `mirror` (a site mirror's nginx and registry caches).

May import `config`, `catalog`, `host.layout`, `engines` and `plan`."""
