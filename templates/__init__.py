"""The Jinja templates of every file specdec renders (a package so they ship in the wheel as
`specdec.templates`)."""
