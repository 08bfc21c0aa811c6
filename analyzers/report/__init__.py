"""An Analysis shown: text, Markdown, JSON, HTML (page and notebook), the tables behind the
findings, and the export of every table as files."""
