"""The PACS dialog's forms: one server record (the password goes to the keyring) and the study query."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from medseg.io.pacs import PacsServer, QueryFilters


class ServerForm(QGroupBox):
    """The fields of one server record; the password goes to the keyring, never to the record."""

    edited = Signal()  # the user changed a field

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Server", parent)
        self.name = QLineEdit(self)
        self.protocol = QComboBox(self)
        self.protocol.addItem("DICOMweb", "dicomweb")
        self.protocol.addItem("DIMSE (DICOM network)", "dimse")
        self.url = QLineEdit(self)
        self.url.setPlaceholderText("https://pacs.example.org/dicom-web")
        self.host = QLineEdit(self)
        self.port = QSpinBox(self)
        self.port.setRange(1, 65535)
        self.called_aet = QLineEdit(self)
        self.our_aet = QLineEdit("MEDSEG", self)
        self.storage_port = QSpinBox(self)
        self.storage_port.setRange(1, 65535)
        self.retrieve = QComboBox(self)
        self.retrieve.addItem("C-GET", "get")
        self.retrieve.addItem("C-MOVE to our storage port", "move")
        self.tls = QCheckBox("TLS", self)
        self.ca_file = QLineEdit(self)
        self.ca_file.setPlaceholderText("CA file (PEM); empty = system certificates")
        self.auth = QComboBox(self)
        for text, kind in (("none", "none"), ("user + password", "basic"), ("bearer token", "bearer")):
            self.auth.addItem(text, kind)
        self.username = QLineEdit(self)
        self.secret = QLineEdit(self)
        self.secret.setEchoMode(QLineEdit.EchoMode.Password)
        self.secret.setPlaceholderText("kept in the OS keyring; empty = keep the stored one")
        self.timeout = QDoubleSpinBox(self)
        self.timeout.setRange(1, 600)
        self.timeout.setSuffix(" s")
        form = QFormLayout(self)
        for label, widget in (("Name", self.name), ("Protocol", self.protocol), ("URL", self.url), ("Host", self.host),
                              ("Port", self.port), ("Called AE title", self.called_aet),
                              ("Our AE title", self.our_aet), ("Our storage port", self.storage_port),
                              ("Retrieve with", self.retrieve), ("", self.tls), ("CA file", self.ca_file),
                              ("Login", self.auth), ("User", self.username), ("Password / token", self.secret),
                              ("Timeout", self.timeout)):
            form.addRow(label, widget)
        self.protocol.currentIndexChanged.connect(self._update_enabled)
        for widget in (self.name, self.url, self.host, self.called_aet, self.our_aet, self.ca_file, self.username):
            widget.textEdited.connect(self.edited)
        for widget in (self.port, self.storage_port, self.timeout):
            widget.valueChanged.connect(self.edited)
        for widget in (self.protocol, self.retrieve, self.auth):
            widget.activated.connect(self.edited)
        self.tls.clicked.connect(self.edited)
        self.set_server(PacsServer(name="new server", protocol="dicomweb", url="http://localhost:8042/dicom-web"))

    @Slot()
    def _update_enabled(self) -> None:
        web = self.protocol.currentData() == "dicomweb"
        self.url.setEnabled(web)
        for widget in (self.host, self.port, self.called_aet, self.our_aet, self.storage_port, self.retrieve, self.tls):
            widget.setEnabled(not web)
        for widget in (self.auth, self.username, self.secret):
            widget.setEnabled(web)

    def set_server(self, server: PacsServer) -> None:
        blocked = [w.blockSignals(True) for w in (self.port, self.storage_port, self.timeout)]
        self.name.setText(server.name)
        self.protocol.setCurrentIndex(self.protocol.findData(server.protocol))
        self.url.setText(server.url)
        self.host.setText(server.host)
        self.port.setValue(server.port)
        self.called_aet.setText(server.called_aet)
        self.our_aet.setText(server.our_aet)
        self.storage_port.setValue(server.storage_port)
        self.retrieve.setCurrentIndex(self.retrieve.findData(server.retrieve))
        self.tls.setChecked(server.tls)
        self.ca_file.setText(server.ca_file)
        self.auth.setCurrentIndex(self.auth.findData(server.auth))
        self.username.setText(server.username)
        self.secret.clear()
        self.timeout.setValue(server.timeout_s)
        for widget, was in zip((self.port, self.storage_port, self.timeout), blocked):
            widget.blockSignals(was)
        self._update_enabled()

    def server(self) -> PacsServer:
        """The record the fields describe (raises PacsError when a field is invalid)."""
        return PacsServer(name=self.name.text().strip(), protocol=self.protocol.currentData(),
                          url=self.url.text().strip(), host=self.host.text().strip(), port=self.port.value(),
                          called_aet=self.called_aet.text().strip(), our_aet=self.our_aet.text().strip(),
                          storage_port=self.storage_port.value(), retrieve=self.retrieve.currentData(),
                          tls=self.tls.isChecked(), ca_file=self.ca_file.text().strip(),
                          auth=self.auth.currentData(), username=self.username.text().strip(),
                          timeout_s=self.timeout.value())


class QueryForm(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Find studies", parent)
        self.fields: dict[str, QLineEdit] = {}
        form = QFormLayout(self)
        for key, label, hint in (("patient_id", "Patient ID", ""), ("patient_name", "Patient name", "* = any text"),
                                 ("birth_date", "Birth date", "YYYYMMDD"), ("date_from", "Study date from", "YYYYMMDD"),
                                 ("date_to", "Study date to", "YYYYMMDD"), ("modality", "Modality", "CT, MR ..."),
                                 ("accession_number", "Accession number", ""), ("description", "Description", "")):
            edit = QLineEdit(self)
            edit.setPlaceholderText(hint)
            self.fields[key] = edit
            form.addRow(label, edit)

    def filters(self) -> QueryFilters:
        return QueryFilters(**{key: edit.text().strip() for key, edit in self.fields.items()})
