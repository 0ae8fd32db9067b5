"""What specdec does on a host, as pure shell-command builders and output parsers: on-host
paths (`layout`, part of the shared vocabulary), release directories and the atomic
``current`` / ``last-good`` switches (`release`), the guard that reverts an unconfirmed release
(`guard`), the deploy lock (`lock`), weights prefetch (`prefetch`), Jetson power modes
(`power`) and device identity (`identify`).

May import `config`, `catalog`, the engines' fact tables and the unit text of `render`
(`unitfile`, `sandbox`); never pyinfra."""
