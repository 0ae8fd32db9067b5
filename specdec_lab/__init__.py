"""The emulated lab fleet, beside the product: systemd-nspawn hosts with real sshd and systemd
that carry a device's identity, in network namespaces of their own (`fleet`, `host`, `rootfs`,
`instance`, `state`, `teardown`), a site registry and images (`images`), the lab's Hugging Face
Hub (`hub`, `hubsvc`, `hubrepo`, `hubclient`), link conditions (`link`), tegra tool stand-ins
(`tegra`, `nvpmodel/`), user traffic (`traffic`), its CLI (`cli`, reached by `specdec lab`
through the ``specdec.commands`` entry point), the engine emulator (`emulator/`) and the
contract harness against the real engine releases (`contract/`).

May import all of specdec; specdec never imports it."""
